"""AI-factory scale (placeholder docstring, expanded below)."""
from ._fabric import (DEFAULT_SWITCH_RADIX, PathTable, RailView, clos_paths, ecmp_paths,
                      link_rails, rail_symmetric_paths, rail_view, scale_topology)
from ._step import (DEFAULT_EP, DEFAULT_MICROBATCHES, DEFAULT_MODEL, DEFAULT_PP, DEFAULT_SKEW,
                    PHASES, StepFlows, scale_plan, step_flows)
from ._run import (CONGESTED_DELAY, DEFAULT_DT_US, DEFAULT_MAX_PATHS, HASHED_ROUTING,
                   HORIZON_FACTOR, IDEAL, RailRun, ideal_rails, point_metrics, route_flows,
                   run_scale, scale_point, simulate_rails,
                   simulate_rails_on_devices)
from ._validate import (balls_into_bins, random_bisection, ring_shift, uplinks_used,
                        window_efficiency)
