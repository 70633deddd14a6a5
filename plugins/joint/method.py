"""Joint (multi-task) training, the upper bound: at step i train on the union of tasks 1..i.

Step T is plain multi-task training on all tasks; earlier rows fill the accuracy matrix so the same
metrics apply. Training continues from the previous step's weights (not from scratch), which changes
nothing at step T's optimum but keeps the cost linear in T.
"""

from clbench.method import Method


class Joint(Method):
    needs_logits = False  # loss_terms does not read the logits

    def train_tasks(self, index: int) -> list[str]:
        return list(self.ctx.order[: index + 1])
