"""τ²-bench's airline data model as pydantic classes: class names, field names, types and order as
the benchmark declares them.

memrl keeps the database as plain dicts (it hashes and deep-merges them), so these classes are
used only where τ²-bench itself runs pydantic: loading the database (its ``model_dump`` fixes
field order, drops unknown keys and turns declared floats into floats) and the objects its tools
build from the agent's arguments (``FlightInfo(**flight)``, ``Passenger(**p)``, ``Payment(**p)``,
``Reservation(...)``, ``Certificate(...)``). A bad argument then fails with the same
``ValidationError`` text, "1 validation error for Passenger ...", that τ²-bench shows its agent.
"""

from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict

FlightType = Literal["round_trip", "one_way"]
CabinClass = Literal["business", "economy", "basic_economy"]
Insurance = Literal["yes", "no"]
MembershipLevel = Literal["gold", "silver", "regular"]


class AirportCode(BaseModel):
    iata: str
    city: str


class Name(BaseModel):
    first_name: str
    last_name: str


class Address(BaseModel):
    address1: str
    address2: Optional[str] = None
    city: str
    country: str
    state: str
    zip: str


class Payment(BaseModel):
    """One entry of a reservation's payment history (a negative amount is a refund)."""

    payment_id: str
    amount: int


class PaymentMethodBase(BaseModel):
    source: str
    id: str


class CreditCard(PaymentMethodBase):
    source: Literal["credit_card"]
    brand: str
    last_four: str


class GiftCard(PaymentMethodBase):
    source: Literal["gift_card"]
    amount: float
    id: str


class Certificate(PaymentMethodBase):
    source: Literal["certificate"]
    amount: float


PaymentMethod = Union[CreditCard, GiftCard, Certificate]


class Passenger(BaseModel):
    first_name: str
    last_name: str
    dob: str


class FlightDateStatusAvailable(BaseModel):
    status: Literal["available"]
    available_seats: dict[CabinClass, int]
    prices: dict[CabinClass, int]


class FlightDataStatusOnTime(BaseModel):
    status: Literal["on time"]
    estimated_departure_time_est: str
    estimated_arrival_time_est: str


class FlightDataStatusFlying(BaseModel):
    status: Literal["flying"]
    actual_departure_time_est: str
    estimated_arrival_time_est: str


class FlightDateStatusLanded(BaseModel):
    status: Literal["landed"]
    actual_departure_time_est: str
    actual_arrival_time_est: str


class FlightDateStatusCancelled(BaseModel):
    status: Literal["cancelled"]


class FlightDateStatusDelayed(BaseModel):
    status: Literal["delayed"]
    estimated_departure_time_est: str
    estimated_arrival_time_est: str


FlightDateStatus = Union[FlightDateStatusAvailable, FlightDateStatusLanded, FlightDateStatusCancelled,
                         FlightDateStatusDelayed, FlightDataStatusFlying, FlightDataStatusOnTime]


class FlightBase(BaseModel):
    flight_number: str
    origin: str
    destination: str


class Flight(FlightBase):
    scheduled_departure_time_est: str
    scheduled_arrival_time_est: str
    dates: dict[str, FlightDateStatus]


class DirectFlight(FlightBase):
    """A search result: one flight on one date with its seats and prices."""

    status: Literal["available"]
    scheduled_departure_time_est: str
    scheduled_arrival_time_est: str
    date: Optional[str] = None
    available_seats: dict[CabinClass, int]
    prices: dict[CabinClass, int]


class ReservationFlight(FlightBase):
    date: str
    price: int


class FlightInfo(BaseModel):
    """A flight the agent names in a booking or a change: number and date."""

    flight_number: str
    date: str


class User(BaseModel):
    user_id: str
    name: Name
    address: Address
    email: str
    dob: str
    payment_methods: dict[str, PaymentMethod]
    saved_passengers: list[Passenger]
    membership: MembershipLevel
    reservations: list[str]


class Reservation(BaseModel):
    reservation_id: str
    user_id: str
    origin: str
    destination: str
    flight_type: FlightType
    cabin: CabinClass
    flights: list[ReservationFlight]
    passengers: list[Passenger]
    payment_history: list[Payment]
    created_at: str
    total_baggages: int
    nonfree_baggages: int
    insurance: Insurance
    status: Optional[Literal["cancelled"]] = None


class FlightDB(BaseModel):
    """The whole database; unknown top-level keys are refused, as τ²-bench's ``DB`` base does."""

    model_config = ConfigDict(extra="forbid")

    flights: dict[str, Flight]
    users: dict[str, User]
    reservations: dict[str, Reservation]
