"""Masked sparse training (Expander-EWC's Algorithm 1): the masks (:mod:`.masks`), their settings and the paper's
presets (:mod:`.config`), and the methods that train only a mask's coordinates under a damped-Fisher EWC penalty
(:mod:`.method`). ``expander_ewc`` registers Expander-EWC and its ablations on it, ``lota`` LoTA/LoTTO and
``pertask`` the per-task masked methods; it registers nothing itself.
"""
