"""The airline's records as the agent's tools use them: lookups, searches and the money rules they share.

Each lookup fails with τ²-bench's text for a missing user, reservation, flight or date; the new
reservation ids follow τ²'s fixed sequence. :class:`~memrl.envs.domains.airline.tools.AirlineTools`
adds the tools themselves on top.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel

from memrl.envs.domains.airline.models import DirectFlight, FlightDB, Payment
from memrl.envs.toolkit import Toolkit

NEW_RESERVATION_IDS = ("HATHAT", "HATHAU", "HATHAV")


def as_models(items: Any, cls: type[BaseModel]) -> Any:
    """τ²'s conversion of a list argument: when every item is a dict, each becomes a ``cls``
    (invalid ones raise pydantic's error); otherwise the value goes on as it was given."""
    if all(isinstance(item, dict) for item in items):
        return [cls(**item) for item in items]
    return items


def dumped(value: Any) -> Any:
    """A stored value as τ²'s ``model_dump`` shows it: models dumped, anything else copied as is."""
    if isinstance(value, BaseModel):
        return value.model_dump()
    if isinstance(value, list):
        return [dumped(v) for v in value]
    return copy.deepcopy(value)


class AirlineRecords(Toolkit):
    """Access to ``db.json`` (``flights``, ``users``, ``reservations``) shared by the airline's tools."""

    strict_args = False  # τ²-bench hands the agent's arguments to the method unchecked

    @classmethod
    def normalize_db(cls, db: dict[str, Any]) -> dict[str, Any]:
        """τ²'s ``FlightDB`` after validation and ``model_dump``: model field order, floats, no extras."""
        return FlightDB.model_validate(db).model_dump()

    # -- lookups --------------------------------------------------------------------------------
    def _user(self, user_id: str) -> dict[str, Any]:
        if user_id not in self.db["users"]:
            raise ValueError(f"User {user_id} not found")
        return self.db["users"][user_id]

    def _reservation(self, reservation_id: str) -> dict[str, Any]:
        if reservation_id not in self.db["reservations"]:
            raise ValueError(f"Reservation {reservation_id} not found")
        return self.db["reservations"][reservation_id]

    def _flight(self, flight_number: str) -> dict[str, Any]:
        if flight_number not in self.db["flights"]:
            raise ValueError(f"Flight {flight_number} not found")
        return self.db["flights"][flight_number]

    def _flight_day(self, flight_number: str, date: str) -> dict[str, Any]:
        flight = self._flight(flight_number)
        if date not in flight["dates"]:
            raise ValueError(f"Flight {flight_number} not found on date {date}")
        return flight["dates"][date]

    def _bookable_day(self, flight_number: str, date: str, cabin: str, seats: int) -> dict[str, Any]:
        """The flight's record for the date, checked to be open for booking with ``seats`` free."""
        day = self._flight_day(flight_number, date)
        if day["status"] != "available":
            raise ValueError(f"Flight {flight_number} not available on date {date}")
        if day["available_seats"][cabin] < seats:
            raise ValueError(f"Not enough seats on flight {flight_number}")
        return day

    def _new_reservation_id(self) -> str:
        for reservation_id in NEW_RESERVATION_IDS:
            if reservation_id not in self.db["reservations"]:
                return reservation_id
        raise ValueError("Too many reservations")

    def _direct_flights(self, date: str, origin: str | None = None, destination: str | None = None,
                        leave_after: str | None = None) -> list[dict[str, Any]]:
        """Flights open for booking on ``date`` (from/to where given, leaving at or after a time)."""
        found = []
        for flight in self.db["flights"].values():
            if ((origin is None or flight["origin"] == origin)
                    and (destination is None or flight["destination"] == destination)
                    and date in flight["dates"] and flight["dates"][date]["status"] == "available"
                    and (leave_after is None or flight["scheduled_departure_time_est"] >= leave_after)):
                day = flight["dates"][date]
                found.append(DirectFlight(
                    flight_number=flight["flight_number"], origin=flight["origin"],
                    destination=flight["destination"], status="available",
                    scheduled_departure_time_est=flight["scheduled_departure_time_est"],
                    scheduled_arrival_time_est=flight["scheduled_arrival_time_est"],
                    available_seats=day["available_seats"], prices=day["prices"]).model_dump())
        return found

    def _pay_change(self, reservation: dict[str, Any], payment_id: str, total_price: Any) -> None:
        """Pay (or, negative, refund) a change with one stored method of the reservation's user: a
        certificate is refused, a gift card needs the balance and is debited at once; the payment is
        added to the reservation's history unless the price is 0."""
        user = self._user(reservation["user_id"])
        if payment_id not in user["payment_methods"]:
            raise ValueError("Payment method not found")
        method = user["payment_methods"][payment_id]
        if method["source"] == "certificate":
            raise ValueError("Certificate cannot be used to update reservation")
        if method["source"] == "gift_card" and method["amount"] < total_price:
            raise ValueError("Gift card balance is not enough")
        if method["source"] == "gift_card":
            method["amount"] -= total_price
        if total_price != 0:
            reservation["payment_history"].append(Payment(payment_id=payment_id, amount=total_price).model_dump())

    @staticmethod
    def _check_booking_payments(user: dict[str, Any], payments: list[Payment], total_price: Any) -> None:
        """Each payment names a stored method (a gift card or certificate with the balance for it),
        and the payments add up to the price exactly."""
        for payment in payments:
            if payment.payment_id not in user["payment_methods"]:
                raise ValueError(f"Payment method {payment.payment_id} not found")
            method = user["payment_methods"][payment.payment_id]
            if method["source"] in ("gift_card", "certificate") and method["amount"] < payment.amount:
                raise ValueError(f"Not enough balance in payment method {payment.payment_id}")
        paid = sum(payment.amount for payment in payments)
        if paid != total_price:
            raise ValueError(f"Payment amount does not add up, total price is {total_price}, but paid {paid}")
