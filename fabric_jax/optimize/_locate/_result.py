"""The result of a localisation (links ranked, estimated factors and losses) and the
ranking of links by a score (:mod:`fabric_jax.optimize._locate`)."""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class LocateResult:
    """Links ranked by estimated capacity factor (most degraded first).

    Attributes:
      ranking: ``[links]`` link ids, most degraded first (with ``loss``: by the larger
        of ``(1 - factor) / detect`` and ``loss / detect_loss``).
      factor: ``[links]`` estimated capacity factor of each link (by link id).
      fault: whether a fault is reported (top degradation above ``detect``, or top
        loss above ``detect_loss``).
      confidence: ``(d1 - d2) / d1`` with ``d1, d2`` the two largest estimated
        degradations ``1 - phi`` (each over its threshold with ``loss``; 0 when no fault
        is reported): how clearly the top link stands out.
      detect: the reporting threshold on ``1 - phi``.
      evaluations: forward-model evaluations: the descent's steps (each with its
        gradient) plus the single-link refit's (without).
      wall_time: seconds, compilation included.
      method: ``"gradient"``, ``"tomography"`` or ``"vote"``.
      loss: final value of the objective (gradient method).
      link_loss: ``[links]`` estimated fraction of the carried bytes each link drops
        (``lossy`` localisations), else ``None``.
      detect_loss: the reporting threshold on ``link_loss``.
    """

    ranking: np.ndarray
    factor: np.ndarray
    fault: bool
    confidence: float
    detect: float
    evaluations: int
    wall_time: float
    method: str
    loss: float = float("nan")
    link_loss: np.ndarray | None = None
    detect_loss: float = float("nan")

    def top(self, k: int = 5) -> list:
        """``[(link, factor), ...]`` of the ``k`` most degraded links."""
        return [(int(l), float(self.factor[l])) for l in self.ranking[:k]]

    def to_dict(self) -> dict:
        d = dict(method=self.method, fault=bool(self.fault), confidence=self.confidence,
                 detect=self.detect, evaluations=self.evaluations,
                 wall_time=self.wall_time, loss=self.loss, top=self.top(10))
        if self.link_loss is not None:
            d.update(detect_loss=self.detect_loss, top_loss=[
                (int(l), float(self.link_loss[l])) for l in self.ranking[:10]])
        return d


def rank_by_score(score, detect):
    order = np.argsort(-score, kind="stable")
    d1 = float(score[order[0]])
    d2 = float(score[order[1]]) if score.size > 1 else 0.0
    fault = d1 > detect
    return order, fault, ((d1 - d2) / d1 if fault and d1 > 0 else 0.0)

