"""τ²-bench's ``mock`` domain: a tiny task manager (agent side) and notifications (user side).

The agent tools behave as τ²-bench's (same outputs, errors and unchecked
arguments: ``update_task_status`` stores any status, as τ² does; ``create_task`` builds τ²'s
pydantic ``Task``, so a non-string title is refused with its message). The user's side is
τ²-bench's notification inbox (check, dismiss); in solo mode the agent reaches it by name,
as τ²-bench routes a solo agent's call to a user tool. The data is the user's own copy of
τ²-bench (``mock/db.json``, ``user_db.json``, ``tasks.json``).
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel

from memrl.envs.toolkit import Toolkit, tool


class Task(BaseModel):
    """τ²-bench's mock task model, built from the caller's title and description as τ² builds it (a
    non-string fails with pydantic's message)."""

    task_id: str
    title: str
    description: Optional[str] = None
    status: Literal["pending", "completed"]


class MockTools(Toolkit):
    """Tasks owned by users; a task is 'pending' or 'completed'."""

    tau2_class = "tau2.domains.mock.tools:MockTools"

    strict_args = False

    @classmethod
    def normalize_db(cls, db: dict[str, Any]) -> dict[str, Any]:
        """τ²'s MockDB dump: task and user fields in model order, a missing description null."""
        return {"tasks": {k: {f: t.get(f) for f in ("task_id", "title", "description", "status")}
                          for k, t in db["tasks"].items()},
                "users": {k: {f: u.get(f) for f in ("user_id", "name", "tasks")} for k, u in db["users"].items()}}

    def _task(self, task_id: str) -> dict[str, Any]:
        if task_id not in self.db["tasks"]:
            raise ValueError(f"Task {task_id} not found")
        return self.db["tasks"][task_id]

    @tool("write")
    def create_task(self, user_id: str, title: str, description: str | None = None) -> dict[str, Any]:
        """Create a new pending task for a user.

        Args:
            user_id: The id of the user who owns the task, such as 'user_1'.
            title: The title of the task.
            description: An optional description.
        """
        if user_id not in self.db["users"]:
            raise ValueError(f"User {user_id} not found")
        task_id = f"task_{len(self.db['tasks']) + 1}"
        task = Task(task_id=task_id, title=title, description=description, status="pending").model_dump()
        self.db["tasks"][task_id] = task
        self.db["users"][user_id]["tasks"].append(task_id)
        return task

    @tool("read")
    def get_users(self) -> list[dict[str, Any]]:
        """List all users with their task ids."""
        return list(self.db["users"].values())

    @tool("write")
    def update_task_status(self, task_id: str, status: Literal["pending", "completed"]) -> dict[str, Any]:
        """Set the status of a task.

        Args:
            task_id: The task id, such as 'task_1'.
            status: The new status: 'pending' or 'completed'.
        """
        task = self._task(task_id)
        task["status"] = status
        return task

    @tool("generic")
    def transfer_to_human_agents(self, summary: str) -> str:
        """Transfer the user to a human agent, with a summary of the issue.

        Args:
            summary: A summary of the user's issue.
        """
        return "Transfer successful"

    def assert_task_status(self, task_id: str, expected_status: str) -> bool:
        """Assertion used by tasks: the task exists and has the expected status."""
        return self._task(task_id)["status"] == expected_status

    def assert_number_of_tasks(self, user_id: str, expected_number: int) -> bool:
        """Assertion used by tasks: the user has this many tasks."""
        if user_id not in self.db["users"]:
            raise ValueError(f"User {user_id} not found")
        return len(self.db["users"][user_id]["tasks"]) == expected_number


class MockUserTools(Toolkit):
    """The user's device: notifications that the user can read and dismiss (τ²-bench's inbox)."""

    tau2_class = "tau2.domains.mock.user_tools:MockUserTools"

    strict_args = False

    def add_notification(self, notification_id: str, message: str, task_id: str | None = None) -> dict[str, Any]:
        """Initialization action: a new unread notification."""
        note = {"notification_id": notification_id, "message": message, "status": "unread", "task_id": task_id}
        self.db.setdefault("notifications", {})[notification_id] = note
        return note

    @tool("read")
    def check_notifications(self) -> list[dict[str, Any]]:
        """List the notifications on the user's device."""
        return list(self.db.get("notifications", {}).values())

    @tool("write")
    def dismiss_notification(self, notification_id: str) -> str:
        """Dismiss a notification (marks it read).

        Args:
            notification_id: The notification id, such as 'notif_1'.
        """
        note = self.db.get("notifications", {}).get(notification_id)
        if note is None:
            raise ValueError(f"Notification {notification_id} not found")
        note["status"] = "read"
        return f"Notification {notification_id} dismissed"

    def assert_notification_status(self, notification_id: str, expected_status: str) -> bool:
        return self.db.get("notifications", {}).get(notification_id, {}).get("status") == expected_status
