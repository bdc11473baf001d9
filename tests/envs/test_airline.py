"""τ²-bench's airline tools in memrl: observations, database changes and refusals (../shared/tau2/airline).

Every expected value here is written from τ²-bench's airline toolkit and data model and checked
by hand against the database: a result is ``json.dumps`` of the model's ``model_dump()`` (model
field order, declared floats as floats), a refusal ``f"Error: {exception}"``, and the tools do
not apply the policy.
"""

from __future__ import annotations

import json

import pydantic
import pytest

from memrl.envs.domain import load_domain
from memrl.envs.messages import ToolCall

DOCS = "https://errors.pydantic.dev/" + ".".join(pydantic.VERSION.split(".")[:2])  # pydantic's error footer


@pytest.fixture(scope="module")
def airline(tau2_dir):
    return load_domain("airline", tau2_dir)


def step(env, name, **args):
    return env.step(ToolCall(name, args))


def ok(env, name, **args):
    obs = step(env, name, **args)
    assert not obs.error, obs.content
    return json.loads(obs.content)


def P(first, last, dob):
    return {"first_name": first, "last_name": last, "dob": dob}


def F(number, date):
    return {"flight_number": number, "date": date}


MIA_LI = (
    '{"user_id": "mia_li_3668", "name": {"first_name": "Mia", "last_name": "Li"}, "address": {"address1": '
    '"975 Sunset Drive", "address2": "Suite 217", "city": "Austin", "country": "USA", "state": "TX", "zip": '
    '"78750"}, "email": "mia.li3818@example.com", "dob": "1990-04-05", "payment_methods": {"credit_card_4421486": '
    '{"source": "credit_card", "id": "credit_card_4421486", "brand": "visa", "last_four": "7447"}, '
    '"certificate_4856383": {"source": "certificate", "id": "certificate_4856383", "amount": 100.0}, '
    '"certificate_7504069": {"source": "certificate", "id": "certificate_7504069", "amount": 250.0}, '
    '"credit_card_1955700": {"source": "credit_card", "id": "credit_card_1955700", "brand": "visa", "last_four": '
    '"1907"}}, "saved_passengers": [{"first_name": "Amelia", "last_name": "Ahmed", "dob": "1957-03-21"}], '
    '"membership": "gold", "reservations": ["NO6JO3", "AIXC49", "HKEG34"]}')


def test_records_read_as_tau2_dumps_them(airline):
    """Model field order (user_id first, a card's id before its brand), certificate amounts as floats."""
    env = airline.new_env()
    assert step(env, "get_user_details", user_id="mia_li_3668").content == MIA_LI
    res = ok(env, "get_reservation_details", reservation_id="K1NW8N")
    assert list(res) == ["reservation_id", "user_id", "origin", "destination", "flight_type", "cabin", "flights",
                         "passengers", "payment_history", "created_at", "total_baggages", "nonfree_baggages",
                         "insurance", "status"]
    assert res["flights"][0] == {"flight_number": "HAT023", "origin": "JFK", "destination": "SFO",
                                 "date": "2024-05-26", "price": 53} and res["status"] is None
    assert step(env, "get_flight_status", flight_number="HAT001", date="2024-05-03").content == "cancelled"
    assert step(env, "calculate", expression="(364 + 248 + 259) * 3").content == "2613.0"
    airports = ok(env, "list_all_airports")
    assert len(airports) == 20 and airports[0] == {"iata": "SFO", "city": "San Francisco"}


BOOK = dict(user_id="mohamed_silva_9265", origin="JFK", destination="SFO", flight_type="round_trip", cabin="business",
            flights=[F("HAT023", "2024-05-26"), F("HAT204", "2024-05-28"), F("HAT100", "2024-05-28")],
            passengers=[P("Mohamed", "Silva", "1960-11-26"), P("Raj", "Sanchez", "1986-09-12"),
                        P("Liam", "Wilson", "1980-03-27")],
            payment_methods=[{"payment_id": "certificate_3765853", "amount": 500},
                             {"payment_id": "gift_card_8020792", "amount": 198},
                             {"payment_id": "gift_card_6136092", "amount": 129},
                             {"payment_id": "credit_card_2198526", "amount": 1786}],
            total_baggages=0, nonfree_baggages=0, insurance="no")


def test_booking_pays_exactly_and_takes_seats(airline):
    """Business 364 + 248 + 259 = 871 per passenger, x3 = 2613 = 500 + 198 + 129 + 1786: the certificate
    is removed whole, the gift cards drop to 0.0, each flight loses 3 business seats."""
    env = airline.new_env()
    got = ok(env, "book_reservation", **BOOK)
    assert got == {
        "reservation_id": "HATHAT", "user_id": "mohamed_silva_9265", "origin": "JFK", "destination": "SFO",
        "flight_type": "round_trip", "cabin": "business",
        "flights": [{"flight_number": "HAT023", "origin": "JFK", "destination": "SFO", "date": "2024-05-26", "price": 364},
                    {"flight_number": "HAT204", "origin": "SFO", "destination": "SEA", "date": "2024-05-28", "price": 248},
                    {"flight_number": "HAT100", "origin": "SEA", "destination": "JFK", "date": "2024-05-28", "price": 259}],
        "passengers": BOOK["passengers"], "payment_history": BOOK["payment_methods"],
        "created_at": "2024-05-15T15:00:00", "total_baggages": 0, "nonfree_baggages": 0, "insurance": "no",
        "status": None}
    db = env.tools.db
    user = db["users"]["mohamed_silva_9265"]
    assert "certificate_3765853" not in user["payment_methods"]
    assert user["payment_methods"]["gift_card_8020792"]["amount"] == 0.0
    assert user["payment_methods"]["gift_card_6136092"]["amount"] == 0.0
    assert user["reservations"] == ["K1NW8N", "HATHAT"] and db["reservations"]["HATHAT"] == got
    seats = [db["flights"][n]["dates"][d]["available_seats"]["business"]
             for n, d in (("HAT023", "2024-05-26"), ("HAT204", "2024-05-28"), ("HAT100", "2024-05-28"))]
    assert seats == [6 - 3, 17 - 3, 9 - 3]
    # fees: insurance $30 x 3, two paid bags $50 x 2 -> 2613 + 90 + 100
    again = dict(BOOK, insurance="yes", total_baggages=3, nonfree_baggages=2,
                 payment_methods=[{"payment_id": "credit_card_2198526", "amount": 2803}])
    assert ok(env, "book_reservation", **again)["reservation_id"] == "HATHAU"


def test_the_policy_is_left_to_the_agent(airline):
    """Cancelling twice appends refunds of refunds, a flown trip can be cancelled, a basic-economy trip
    changed; a cancellation credits no gift card and frees no seat."""
    env = airline.new_env()
    ok(env, "cancel_reservation", reservation_id="K1NW8N")
    twice = ok(env, "cancel_reservation", reservation_id="K1NW8N")
    assert [p["amount"] for p in twice["payment_history"]] == [567, -567, -567, 567]
    assert twice["status"] == "cancelled"
    assert env.tools.db["users"]["mohamed_silva_9265"]["payment_methods"]["gift_card_6136092"]["amount"] == 129.0
    flown = ok(env, "cancel_reservation", reservation_id="I6M8JQ")  # flew on 2024-05-09
    assert flown["status"] == "cancelled" and flown["payment_history"][-1] == {
        "payment_id": "credit_card_5799376", "amount": -752}
    # XEHM4B is basic economy (65 + 83 paid, 2 passengers): cut to its first flight, HAT005, refunding 83 x 2
    moved = ok(env, "update_reservation_flights", reservation_id="XEHM4B", cabin="basic_economy",
               flights=[F("HAT005", "2024-05-20")], payment_id="credit_card_2408938")
    assert moved["flights"] == [{"flight_number": "HAT005", "origin": "LAS", "destination": "ATL",
                                 "date": "2024-05-20", "price": 65}]  # same flight and cabin: the price paid stays
    assert moved["payment_history"][-1] == {"payment_id": "credit_card_2408938", "amount": 65 * 2 - (65 + 83) * 2}


def test_changes_pay_or_refund_the_difference(airline):
    env = airline.new_env()
    # GV1N64: business (561 + 1339) -> basic economy (53 + 99), 3 passengers: -5244 back onto the gift card
    got = ok(env, "update_reservation_flights", reservation_id="GV1N64", cabin="basic_economy",
             flights=[F("HAT003", "2024-05-19"), F("HAT290", "2024-05-20")], payment_id="gift_card_1642017")
    assert got["payment_history"][-1] == {"payment_id": "gift_card_1642017", "amount": (53 + 99 - 561 - 1339) * 3}
    assert got["cabin"] == "basic_economy" and [f["price"] for f in got["flights"]] == [53, 99]
    assert env.tools.db["users"]["james_patel_9828"]["payment_methods"]["gift_card_1642017"]["amount"] == 128.0 + 5244
    # OWZ4XL: to economy (196 + 110 - 94 - 80) x 3 = +396, then one flight HAT041 (136 x 3 - 918) = -510
    ok(env, "update_reservation_flights", reservation_id="OWZ4XL", cabin="economy",
       flights=[F("HAT202", "2024-05-21"), F("HAT232", "2024-05-21")], payment_id="credit_card_9659780")
    got = ok(env, "update_reservation_flights", reservation_id="OWZ4XL", cabin="economy",
             flights=[F("HAT041", "2024-05-21")], payment_id="credit_card_9659780")
    assert [p["amount"] for p in got["payment_history"]] == [522, 396, -510]
    # bags: one more paid bag on a gift card (198.0 -> 148.0); then eight more cost 400 > 148
    bags = ok(env, "update_reservation_baggages", reservation_id="K1NW8N", total_baggages=1, nonfree_baggages=1,
              payment_id="gift_card_8020792")
    assert bags["payment_history"][-1] == {"payment_id": "gift_card_8020792", "amount": 50}
    cards = env.tools.db["users"]["mohamed_silva_9265"]["payment_methods"]
    assert cards["gift_card_8020792"]["amount"] == 148.0
    assert step(env, "update_reservation_baggages", reservation_id="K1NW8N", total_baggages=9, nonfree_baggages=9,
                payment_id="gift_card_8020792").content == "Error: Gift card balance is not enough"
    # fewer bags cost nothing (no payment entry), but a certificate is refused even then
    assert step(env, "update_reservation_baggages", reservation_id="K1NW8N", total_baggages=0, nonfree_baggages=0,
                payment_id="certificate_3765853").content == "Error: Certificate cannot be used to update reservation"
    # τ² computes with the value given: 1.5 bags -> 50 x 0.5 = 25.0, recorded as the integer 25
    half = ok(env, "update_reservation_baggages", reservation_id="K1NW8N", total_baggages=2, nonfree_baggages=1.5,
              payment_id="credit_card_2198526")
    assert half["payment_history"][-1]["amount"] == 25 and half["nonfree_baggages"] == 1.5


def test_certificates_ids_and_limits(airline):
    env = airline.new_env()
    texts = [step(env, "send_certificate", user_id="mia_li_3668", amount=a).content for a in (150, 150.0, "75", 10)]
    assert texts == ["Certificate certificate_3221322 added to user mia_li_3668 with amount 150.",
                     "Certificate certificate_3221323 added to user mia_li_3668 with amount 150.0.",
                     "Certificate certificate_3221324 added to user mia_li_3668 with amount 75.",
                     "Error: Too many certificates"]
    methods = env.tools.db["users"]["mia_li_3668"]["payment_methods"]
    assert methods["certificate_3221324"] == {"source": "certificate", "id": "certificate_3221324", "amount": 75.0}


def test_searches(airline):
    env = airline.new_env()
    direct = ok(env, "search_direct_flight", origin="JFK", destination="SEA", date="2024-05-20")
    assert direct[0] == {"flight_number": "HAT069", "origin": "JFK", "destination": "SEA", "status": "available",
                         "scheduled_departure_time_est": "06:00:00", "scheduled_arrival_time_est": "12:00:00",
                         "date": None, "available_seats": {"basic_economy": 17, "economy": 12, "business": 3},
                         "prices": {"basic_economy": 51, "economy": 121, "business": 239}}
    # HAT030 LAX->ORD lands at 00:00:00+1: its connections leave the next day, at or after "00:00:00+1"
    # compared as text (HAT093 at 02:00:00 qualifies)
    pairs = ok(env, "search_onestop_flight", origin="LAX", destination="ATL", date="2024-05-19")
    via = [(a["flight_number"], a["date"], b["flight_number"], b["date"]) for a, b in pairs if a["flight_number"] == "HAT030"]
    assert via == [("HAT030", "2024-05-19", "HAT093", "2024-05-20"), ("HAT030", "2024-05-19", "HAT223", "2024-05-20")]


ERRORS = [
    (dict(BOOK, payment_methods=[{"payment_id": "credit_card_2198526", "amount": 2612}]),
     "Error: Payment amount does not add up, total price is 2613, but paid 2612"),
    (dict(BOOK, payment_methods=[{"payment_id": "gift_card_8020792", "amount": 199},
                                 {"payment_id": "credit_card_2198526", "amount": 2414}]),
     "Error: Not enough balance in payment method gift_card_8020792"),
    (dict(BOOK, payment_methods=[{"payment_id": "credit_card_0", "amount": 2613}]),
     "Error: Payment method credit_card_0 not found"),
    (dict(BOOK, passengers=[{"first_name": "A", "last_name": "B"}]),
     "Error: 1 validation error for Passenger\ndob\n  Field required [type=missing, input_value={'first_name': 'A', "
     f"'last_name': 'B'}}, input_type=dict]\n    For further information visit {DOCS}/v/missing"),
    (dict(BOOK, cabin="first"),
     "Error: 1 validation error for Reservation\ncabin\n  Input should be 'business', 'economy' or 'basic_economy' "
     f"[type=literal_error, input_value='first', input_type=str]\n    For further information visit {DOCS}/v/literal_error"),
    (dict(BOOK, origin=1),
     "Error: 1 validation error for Reservation\norigin\n  Input should be a valid string [type=string_type, "
     f"input_value=1, input_type=int]\n    For further information visit {DOCS}/v/string_type"),
    (dict(BOOK, nonfree_baggages="2"), "Error: unsupported operand type(s) for +=: 'int' and 'str'"),  # 50 * "2"
    (dict(BOOK, flights=["HAT023"]), "Error: 'str' object has no attribute 'flight_number'"),
    (dict(BOOK, flights=[F("HAT001", "2024-05-01")]), "Error: Flight HAT001 not available on date 2024-05-01"),
    (dict(BOOK, flights=[F("HAT001", "2024-06-01")]), "Error: Flight HAT001 not found on date 2024-06-01"),
    (dict(BOOK, cabin="economy"), "Error: Not enough seats on flight HAT204"),  # 1 economy seat, 3 passengers
    (dict(BOOK, user_id="nobody_1"), "Error: User nobody_1 not found"),
    ({k: v for k, v in BOOK.items() if k != "insurance"},
     "Error: AirlineTools.book_reservation() missing 1 required positional argument: 'insurance'"),
]


@pytest.mark.parametrize("args,text", ERRORS, ids=range(len(ERRORS)))
def test_refused_bookings_say_what_tau2_says_and_change_nothing(airline, args, text):
    env = airline.new_env()
    before = env.db_hash()
    obs = step(env, "book_reservation", **args)
    assert obs.error and obs.content == text
    assert env.db_hash() == before


def test_other_refusals(airline):
    env = airline.new_env()
    cases = [
        (("update_reservation_flights", dict(reservation_id="XEHM4B", cabin="first", flights=[F("HAT005", "2024-05-20")],
                                             payment_id="credit_card_2408938")), "Error: 'first'"),
        (("update_reservation_flights", dict(reservation_id="ZZZZZZ", cabin="economy", flights=[{"flight_number": "X"}],
                                             payment_id="p")),
         "Error: 1 validation error for FlightInfo\ndate\n  Field required [type=missing, input_value={'flight_number': "
         f"'X'}}, input_type=dict]\n    For further information visit {DOCS}/v/missing"),
        (("update_reservation_passengers", dict(reservation_id="K1NW8N", passengers=[P("A", "B", "2000-01-01")])),
         "Error: Number of passengers does not match"),
        (("get_reservation_details", dict(reservation_id="NOPE")), "Error: Reservation NOPE not found"),
        (("get_user_details", dict(user_id=["x"])), "Error: unhashable type: 'list'"),
        (("get_flight_status", dict(flight_number="HAT000", date="2024-05-15")), "Error: Flight HAT000 not found"),
        (("cancel_reservation", {}),
         "Error: AirlineTools.cancel_reservation() missing 1 required positional argument: 'reservation_id'"),
        (("no_such_tool", {}), "Error: Tool 'no_such_tool' not found."),
    ]
    for (name, args), text in cases:
        obs = step(env, name, **args)
        assert obs.error and obs.content == text, name


def test_a_refusal_after_a_debit_keeps_the_debit(airline):
    """τ² debits the gift card before it builds the Payment: 50 x (1.01 - 0) = 50.5 is not an integer, the
    call fails, and the card has still paid 50.5."""
    env = airline.new_env()
    obs = step(env, "update_reservation_baggages", reservation_id="K1NW8N", total_baggages=2, nonfree_baggages=1.01,
               payment_id="gift_card_8020792")
    assert obs.error and obs.content.startswith("Error: 1 validation error for Payment\namount\n  Input should be a "
                                                "valid integer, got a number with a fractional part")
    card = env.tools.db["users"]["mohamed_silva_9265"]["payment_methods"]["gift_card_8020792"]
    assert card["amount"] == 147.5
    assert env.tools.db["reservations"]["K1NW8N"]["nonfree_baggages"] == 0
