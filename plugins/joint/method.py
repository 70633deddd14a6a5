"""Joint (multi-task) training, the upper bound: at step i train on the union of tasks 1..i.

Step T is plain multi-task training on all tasks; earlier rows fill the accuracy matrix so the same
metrics apply. Training continues from the previous step's weights (not from scratch), which changes
nothing at step T's optimum but keeps the cost linear in T. ``schedule="final"`` trains the union once, after the
last task only, from the untrained weights (the DER paper's JOINT).

Where every task shares the model's one head (class- and domain-incremental streams), each batch is drawn from the
union of the tasks' training sets, shuffled together (``mix_tasks``): a batch of one task on a shared head pulls
every step toward that task's classes, which cost the class-incremental oracle 4–7 points against mixed batches
(issue 49). With a head per task (task-incremental) each batch holds one task, as each batch goes to one head.
"""

from clbench.method import Method, Phase

from .config import JointConfig


class Joint(Method):
    config: JointConfig
    needs_logits = False  # loss_terms does not read the logits
    mix_tasks = True  # batches of the union of the tasks where the head is shared (see the module's docstring)

    def phases(self, task: str, index: int) -> list[Phase]:
        if self.config.schedule == "final" and index < len(self.ctx.order) - 1:
            return []
        return super().phases(task, index)

    def train_tasks(self, index: int) -> list[str]:
        return list(self.ctx.order[: index + 1])
