"""SeqFT: train every parameter on each task in turn, nothing else. The base Method already is it."""

from clbench.method import Method


class SeqFT(Method):
    needs_logits = False  # loss_terms does not read the logits
