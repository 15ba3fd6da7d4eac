"""The experiments and benchmarks: one script per study, importable as a package.

Every script runs three ways from the repository root::

    python experiments/<name>.py [args]       # as the docs and README write it
    python -m experiments.<name> [args]
    from experiments import <name>; <name>.main([args])     # tests, other scripts

Run as a file, a script first puts the repository root on ``sys.path`` (its header:
``if __package__ in (None, ""): sys.path.insert(0, <root>)``), so it imports this
checkout's ``experiments`` and ``fabric_jax`` the same way in all three cases.  The
private modules hold what scripts share: ``_bench`` (timing, device facts, the JSON
``write_json`` wrapper), ``_common`` (the common command line, the table and
``finish``), ``_hpcc``, ``_econ``, ``_hlo`` and ``_report_blocks`` (``report.py``'s
Markdown blocks).  Every results file is written by
:func:`fabric_jax.results.write_results` (atomic, with a ``"run"`` record).

Importing this package imports nothing else.
"""
