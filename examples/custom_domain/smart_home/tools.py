"""The smart-home tools: read a room, switch its light, set its thermostat."""

from __future__ import annotations

from typing import Any

from memrl.envs.toolkit import ToolError, Toolkit, tool


class HomeTools(Toolkit):
    """Rooms with a light and a thermostat; ``db['rooms']`` maps a room name to its state."""

    def _room(self, room: str) -> dict[str, Any]:
        rooms = self.db["rooms"]
        if room not in rooms:
            raise ToolError(f"Room {room} not found; rooms: {', '.join(sorted(rooms))}")
        return rooms[room]

    @tool("read")
    def get_room(self, room: str) -> dict[str, Any]:
        """The state of a room's light and thermostat.

        Args:
            room: The room's name, such as 'kitchen'.
        """
        return self._room(room)

    @tool("write")
    def set_light(self, room: str, on: bool) -> dict[str, Any]:
        """Switch a room's light on or off.

        Args:
            room: The room's name.
            on: True to switch the light on, False to switch it off.
        """
        state = self._room(room)
        state["light_on"] = on
        return state

    @tool("write")
    def set_temperature(self, room: str, celsius: int) -> dict[str, Any]:
        """Set a room's thermostat.

        Args:
            room: The room's name.
            celsius: The target temperature, from 16 to 26 degrees.
        """
        if not 16 <= celsius <= 26:
            raise ToolError("The thermostat accepts 16 to 26 degrees")
        state = self._room(room)
        state["target_celsius"] = celsius
        return state
