"""τ²-bench's ``airline`` agent tools: flights, users and reservations, over plain-dict data.

Written from τ²-bench's airline toolkit for the same observations, database changes and error
texts. What the benchmark does, memrl does, including what it leaves to the agent:

* the tools do not apply the policy: a flown or already-cancelled reservation can be cancelled
  (again: the refunds of refunds are appended), a basic-economy flight can be changed, a
  cancellation returns nothing to gift cards or certificates and frees no seat, a flight change
  takes no seat;
* the clock is fixed: a new reservation is created at 2024-05-15T15:00:00, new reservations are
  HATHAT, HATHAU, HATHAV and new certificates certificate_3221322/3/4, in that order;
* money: a booking must be paid exactly (flights x passengers, $30 insurance per passenger,
  $50 per non-free bag); gift cards and certificates need enough balance per listed payment;
  gift cards are debited, a certificate used in a booking is removed whole; a change is paid
  (or refunded, negative amount) with one method that is not a certificate;
* arguments reach the methods unchecked; where τ²-bench builds a pydantic object from them
  (flights, passengers, payments, the new reservation, a certificate) memrl builds the same
  class (:mod:`.models`), so a bad value fails with the same validation message, and the
  checks run in the benchmark's order (a partly applied call stays partly applied);
* the one-stop search reads the second leg's date as May of 2024, day + 1, unpadded, as τ²
  does (a first leg arriving "+1" on 2024-05-01 looks for its second leg on "2024-05-2").
"""

from __future__ import annotations

import copy
from typing import Any

from memrl.envs.domains.airline.models import (
    AirportCode,
    CabinClass,
    Certificate,
    FlightInfo,
    FlightType,
    Insurance,
    Passenger,
    Payment,
    Reservation,
    ReservationFlight,
)
from memrl.envs.domains.airline.records import AirlineRecords, as_models, dumped
from memrl.envs.calculate import calculate_expression
from memrl.envs.toolkit import tool

NOW = "2024-05-15T15:00:00"  # τ²-bench's fixed clock (the policy's "today" is 2024-05-15)
NEW_CERTIFICATE_NUMBERS = (3221322, 3221323, 3221324)
AIRPORTS = (("SFO", "San Francisco"), ("JFK", "New York"), ("LAX", "Los Angeles"), ("ORD", "Chicago"),
            ("DFW", "Dallas"), ("DEN", "Denver"), ("SEA", "Seattle"), ("ATL", "Atlanta"), ("MIA", "Miami"),
            ("BOS", "Boston"), ("PHX", "Phoenix"), ("IAH", "Houston"), ("LAS", "Las Vegas"), ("MCO", "Orlando"),
            ("EWR", "Newark"), ("CLT", "Charlotte"), ("MSP", "Minneapolis"), ("DTW", "Detroit"),
            ("PHL", "Philadelphia"), ("LGA", "LaGuardia"))


class AirlineTools(AirlineRecords):
    """The airline's back office over ``db.json`` (``flights``, ``users``, ``reservations``)."""

    tau2_class = "tau2.domains.airline.tools:AirlineTools"

    # -- read tools -----------------------------------------------------------------------------
    @tool("read")
    def get_user_details(self, user_id: str) -> dict[str, Any]:
        """Get a user's profile: name, address, payment methods, saved passengers, membership and
        reservation ids.

        Args:
            user_id: The user id, such as 'sara_doe_496'.
        """
        return self._user(user_id)

    @tool("read")
    def get_reservation_details(self, reservation_id: str) -> dict[str, Any]:
        """Get a reservation: flights, passengers, cabin, bags, insurance and payment history.

        Args:
            reservation_id: The reservation id, such as '8JX2WO'.
        """
        return self._reservation(reservation_id)

    @tool("read")
    def list_all_airports(self) -> list[dict[str, Any]]:
        """List the airports served: IATA code and city."""
        return [AirportCode(iata=code, city=city).model_dump() for code, city in AIRPORTS]

    @tool("read")
    def search_direct_flight(self, origin: str, destination: str, date: str) -> list[dict[str, Any]]:
        """Search direct flights between two airports on a date, with seats left and prices per cabin.

        Args:
            origin: Origin airport code (IATA), such as 'JFK'.
            destination: Destination airport code (IATA), such as 'LAX'.
            date: The date, 'YYYY-MM-DD', such as '2024-05-20'.
        """
        return self._direct_flights(date, origin=origin, destination=destination)

    @tool("read")
    def search_onestop_flight(self, origin: str, destination: str, date: str) -> list[list[dict[str, Any]]]:
        """Search connections with one stop between two airports, leaving on a date: pairs of flights,
        the second leaving after the first arrives.

        Args:
            origin: Origin airport code (IATA), such as 'JFK'.
            destination: Destination airport code (IATA), such as 'LAX'.
            date: The date of the first flight, 'YYYY-MM-DD', such as '2024-05-20'.
        """
        pairs = []
        for first in self._direct_flights(date, origin=origin):
            first["date"] = date
            next_day = "+1" in first["scheduled_arrival_time_est"]
            date2 = f"2024-05-{int(date[-2:]) + 1}" if next_day else date  # τ²: May, unpadded
            for second in self._direct_flights(date2, origin=first["destination"], destination=destination,
                                               leave_after=first["scheduled_arrival_time_est"]):
                second["date"] = date2
                pairs.append([first, second])
        return pairs

    @tool("read")
    def get_flight_status(self, flight_number: str, date: str) -> str:
        """Get the status of a flight on a date (available, on time, delayed, flying, landed, cancelled).

        Args:
            flight_number: The flight number, such as 'HAT001'.
            date: The date, 'YYYY-MM-DD'.
        """
        return self._flight_day(flight_number, date)["status"]

    @tool("generic")
    def calculate(self, expression: str) -> str:
        """Evaluate an arithmetic expression, rounded to 2 decimals.

        Args:
            expression: Numbers, + - * /, parentheses and spaces, such as '2 + 2'.
        """
        return calculate_expression(expression)

    @tool("generic")
    def transfer_to_human_agents(self, summary: str) -> str:
        """Transfer the user to a human agent, with a summary of the issue. Only when the user asks
        for one, or the issue cannot be solved with the policy and tools.

        Args:
            summary: A summary of the user's issue.
        """
        return "Transfer successful"

    # -- write tools ----------------------------------------------------------------------------
    @tool("write")
    def book_reservation(self, user_id: str, origin: str, destination: str, flight_type: FlightType,
                         cabin: CabinClass, flights: list[FlightInfo | dict], passengers: list[Passenger | dict],
                         payment_methods: list[Payment | dict], total_baggages: int, nonfree_baggages: int,
                         insurance: Insurance) -> dict[str, Any]:
        """Book a reservation. Needs the user's explicit confirmation.

        Args:
            user_id: The user id, such as 'sara_doe_496'.
            origin: Origin airport code (IATA) of the trip, such as 'SFO'.
            destination: Destination airport code (IATA) of the trip, such as 'JFK'.
            flight_type: 'one_way' or 'round_trip'.
            cabin: 'basic_economy', 'economy' or 'business'.
            flights: Every flight of the trip: objects with flight_number and date.
            passengers: Every passenger: objects with first_name, last_name and dob.
            payment_methods: Objects with payment_id and amount; the amounts add up to the total price.
            total_baggages: The total number of checked bags.
            nonfree_baggages: How many of the bags are paid for.
            insurance: 'yes' or 'no'.
        """
        flights = as_models(flights, FlightInfo)
        passengers = as_models(passengers, Passenger)
        payment_methods = as_models(payment_methods, Payment)
        user = self._user(user_id)
        reservation = Reservation(
            reservation_id=self._new_reservation_id(), user_id=user_id, origin=origin, destination=destination,
            flight_type=flight_type, cabin=cabin, flights=[], passengers=copy.deepcopy(passengers),
            payment_history=copy.deepcopy(payment_methods), created_at=NOW, total_baggages=total_baggages,
            nonfree_baggages=nonfree_baggages, insurance=insurance)
        total_price: Any = 0
        days = []
        for info in flights:
            flight = self._flight(info.flight_number)
            day = self._bookable_day(info.flight_number, info.date, cabin, len(passengers))
            price = day["prices"][cabin]
            reservation.flights.append(ReservationFlight(origin=flight["origin"], destination=flight["destination"],
                                                         flight_number=info.flight_number, date=info.date,
                                                         price=price))
            days.append(day)
            total_price += price * len(passengers)
        if insurance == "yes":
            total_price += 30 * len(passengers)
        total_price += 50 * nonfree_baggages
        self._check_booking_payments(user, payment_methods, total_price)
        for payment in payment_methods:
            method = user["payment_methods"][payment.payment_id]
            if method["source"] == "gift_card":
                method["amount"] -= payment.amount
            elif method["source"] == "certificate":
                user["payment_methods"].pop(payment.payment_id)
        for day in days:
            day["available_seats"][cabin] -= len(passengers)
        stored = self.db["reservations"][reservation.reservation_id] = reservation.model_dump()
        user["reservations"].append(reservation.reservation_id)
        return stored

    @tool("write")
    def cancel_reservation(self, reservation_id: str) -> dict[str, Any]:
        """Cancel a whole reservation; every payment is refunded to its method. Needs the user's
        explicit confirmation.

        Args:
            reservation_id: The reservation id, such as 'ZFA04Y'.
        """
        reservation = self._reservation(reservation_id)
        refunds = [Payment(payment_id=p["payment_id"], amount=-p["amount"]).model_dump()
                   for p in reservation["payment_history"]]
        reservation["payment_history"].extend(refunds)
        reservation["status"] = "cancelled"
        return reservation

    @tool("write")
    def send_certificate(self, user_id: str, amount: int) -> str:
        """Send a travel certificate to a user, as compensation. Be careful!

        Args:
            user_id: The user id, such as 'sara_doe_496'.
            amount: The certificate's value in dollars.
        """
        user = self._user(user_id)
        for payment_id in (f"certificate_{n}" for n in NEW_CERTIFICATE_NUMBERS):
            if payment_id not in user["payment_methods"]:
                certificate = Certificate(id=payment_id, amount=amount, source="certificate")
                user["payment_methods"][payment_id] = certificate.model_dump()
                return f"Certificate {payment_id} added to user {user_id} with amount {amount}."
        raise ValueError("Too many certificates")

    @tool("write")
    def update_reservation_baggages(self, reservation_id: str, total_baggages: int, nonfree_baggages: int,
                                    payment_id: str) -> dict[str, Any]:
        """Change the checked bags of a reservation; added non-free bags cost $50 each. Needs the
        user's explicit confirmation.

        Args:
            reservation_id: The reservation id, such as 'ZFA04Y'.
            total_baggages: The new total number of checked bags.
            nonfree_baggages: The new number of paid bags.
            payment_id: A payment method of the user, such as 'credit_card_7815826' or 'gift_card_7815826'.
        """
        reservation = self._reservation(reservation_id)
        self._user(reservation["user_id"])  # τ² looks the user up first: its error comes before any other
        self._pay_change(reservation, payment_id, 50 * max(0, nonfree_baggages - reservation["nonfree_baggages"]))
        reservation["total_baggages"] = total_baggages
        reservation["nonfree_baggages"] = nonfree_baggages
        return reservation

    @tool("write")
    def update_reservation_flights(self, reservation_id: str, cabin: CabinClass, flights: list[FlightInfo | dict],
                                   payment_id: str) -> dict[str, Any]:
        """Change the flights or the cabin of a reservation; the price difference is paid or refunded.
        Needs the user's explicit confirmation.

        Args:
            reservation_id: The reservation id, such as 'ZFA04Y'.
            cabin: The cabin of the whole reservation after the change.
            flights: EVERY flight of the reservation after the change (unchanged ones too): objects with
                flight_number and date.
            payment_id: A payment method of the user, such as 'credit_card_7815826' or 'gift_card_7815826'.
        """
        flights = as_models(flights, FlightInfo)
        reservation = self._reservation(reservation_id)
        self._user(reservation["user_id"])  # τ² looks the user up first: its error comes before any other
        seats = len(reservation["passengers"])
        total_price: Any = 0
        new_flights = []
        for info in flights:
            kept = next((f for f in reservation["flights"] if f["flight_number"] == info.flight_number
                         and f["date"] == info.date and cabin == reservation["cabin"]), None)
            if kept:  # an unchanged flight keeps the price paid for it
                total_price += kept["price"] * seats
                new_flights.append(kept)
                continue
            flight = self._flight(info.flight_number)
            day = self._bookable_day(info.flight_number, info.date, cabin, seats)
            new = ReservationFlight(flight_number=info.flight_number, date=info.date, price=day["prices"][cabin],
                                    origin=flight["origin"], destination=flight["destination"]).model_dump()
            total_price += new["price"] * seats
            new_flights.append(new)
        total_price -= sum(f["price"] for f in reservation["flights"]) * seats
        self._pay_change(reservation, payment_id, total_price)
        reservation["flights"] = new_flights
        reservation["cabin"] = cabin
        return reservation

    @tool("write")
    def update_reservation_passengers(self, reservation_id: str,
                                      passengers: list[Passenger | dict]) -> dict[str, Any]:
        """Change the passengers' details of a reservation (their number cannot change). Needs the user's
        explicit confirmation.

        Args:
            reservation_id: The reservation id, such as 'ZFA04Y'.
            passengers: Every passenger: objects with first_name, last_name and dob.
        """
        passengers = as_models(passengers, Passenger)
        reservation = self._reservation(reservation_id)
        if len(passengers) != len(reservation["passengers"]):
            raise ValueError("Number of passengers does not match")
        reservation["passengers"] = dumped(passengers)
        return reservation
