"""Generate the built-in ``library`` domain (db.json, tasks.json, split_tasks.json).

Run once by a developer: ``python scripts/make_library_domain.py``. Seeded, so the
output is the same on every run. Every task is checked here: its gold actions
must run without error on a fresh database and replaying them must score 1.0.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from memrl.envs.domain import load_domain
from memrl.envs.evaluate import replay_gold

OUT = Path(__file__).resolve().parents[1] / "src" / "memrl" / "envs" / "domains" / "library"
TODAY = "2026-03-10"

BOOKS = [
    ("The Glass Harbor", "Mara Quinn"), ("Roots of Iron", "Tomas Varga"), ("A Field of Lanterns", "Ines Duarte"),
    ("The Quiet Engine", "Leo Park"), ("Salt and Cedar", "Nadia Okafor"), ("Northern Arithmetic", "Paul Brandt"),
    ("The Cartographer's Son", "Ella Marsh"), ("Winter Orchard", "Sami Haddad"), ("Paper Comets", "Yuki Mori"),
    ("The Last Ferry", "Owen Blake"), ("Copper Sky", "Rita Alves"), ("Tides of Memory", "Hugo Lind"),
    ("The Clockmaker's Garden", "Anya Petrov"), ("Blue Mountain Letters", "Kofi Mensah"),
    ("Small Hours", "Clara Weiss"), ("The Stone Choir", "Ivan Novak"), ("Harvest of Echoes", "Lena Fischer"),
    ("River Without Banks", "Tariq Aziz"), ("The Lantern Keeper", "Mei Chen"), ("Open Water", "Jonas Berg"),
]
MEMBERS = [
    ("Ana Silva", 0.0), ("Ben Carter", 0.0), ("Chloe Dubois", 1.5), ("Dev Patel", 6.0), ("Emma Rossi", 0.0),
    ("Farid Haddad", 2.25), ("Grace Kim", 0.0), ("Hiro Tanaka", 7.5), ("Isla Murphy", 0.0), ("Jon Meyer", 3.0),
    ("Kara Novak", 0.0), ("Luis Ortega", 5.0), ("Mina Cho", 0.0), ("Nils Berg", 0.75),
]


def build_db(rng: random.Random) -> dict:
    books = {}
    for i, (title, author) in enumerate(BOOKS, 1):
        copies = rng.choice([1, 2, 2, 3, 3])
        books[f"B{i:03d}"] = {"book_id": f"B{i:03d}", "title": title, "author": author, "total_copies": copies,
                              "available_copies": copies, "holds": []}
    members = {}
    for i, (name, fines) in enumerate(MEMBERS, 1):
        email = name.lower().replace(" ", ".") + "@example.org"
        members[f"M{i:03d}"] = {"member_id": f"M{i:03d}", "name": name, "email": email, "fines": fines, "loans": []}
    loans = {}
    due_offsets = [-9, -4, -2, 3, 5, 8, 12, 15, 18, 20]
    mids = list(members)
    for n in range(24):
        mid = mids[n % len(mids)] if n < len(mids) else rng.choice(mids)
        if len(members[mid]["loans"]) >= 3:
            continue
        free = [b for b in books.values() if b["available_copies"] > 0]
        b = rng.choice(free)
        lid = f"L{len(loans) + 1:03d}"
        day = (__import__("datetime").date.fromisoformat(TODAY)
               + __import__("datetime").timedelta(days=rng.choice(due_offsets))).isoformat()
        loans[lid] = {"loan_id": lid, "member_id": mid, "book_id": b["book_id"], "title": b["title"], "due_date": day,
                      "renewals": rng.choice([0, 0, 0, 1]), "status": "active"}
        members[mid]["loans"].append(lid)
        b["available_copies"] -= 1
    # a few waiting lists on books that are all out
    for b in books.values():
        if b["available_copies"] == 0 and rng.random() < 0.3:
            b["holds"] = [rng.choice(mids)]
    rules = {"today": TODAY, "loan_days": 21, "renew_days": 14, "max_loans": 3, "max_renewals": 1,
             "fine_per_day": 0.25, "fine_block": 5.0}
    return {"rules": rules, "members": members, "books": books, "loans": loans}


def scenario(reason: str, known: str, extra: str = "") -> dict:
    return {"persona": "A library member who is polite and brief.",
            "instructions": {"domain": "library", "reason_for_call": reason, "known_info": known,
                             "task_instructions": extra or "Answer the agent's questions; when your request is "
                                                           "done or refused, end the conversation."}}


def act(name: str, i: int, compare: list[str] | None = None, **arguments) -> dict:
    a = {"action_id": f"{name}_{i}", "name": name, "arguments": arguments}
    if compare is not None:
        a["compare_args"] = compare
    return a


def make_tasks(db: dict, rng: random.Random) -> list[dict]:
    r = db["rules"]
    members, books, loans = db["members"], db["books"], db["loans"]
    tasks: list[dict] = []

    def add(kind: str, ticket: str, reason: str, known: str, actions: list[dict], *, basis=None, info=None):
        crit: dict = {"actions": actions, "reward_basis": basis or ["DB"]}
        if info:
            crit["communicate_info"] = info
            crit["reward_basis"] = sorted(set(crit["reward_basis"]) | {"COMMUNICATE"})
        tasks.append({"id": f"{kind}_{len([t for t in tasks if t['id'].startswith(kind)]) + 1}",
                      "description": {"purpose": kind}, "ticket": ticket,
                      "user_scenario": scenario(reason, known), "evaluation_criteria": crit})

    active = list(loans.values())
    on_time = [x for x in active if x["due_date"] >= r["today"]]
    overdue = [x for x in active if x["due_date"] < r["today"]]
    renewable = [x for x in on_time if x["renewals"] < r["max_renewals"] and not books[x["book_id"]]["holds"]]
    not_renewable = [x for x in active if x not in renewable]
    ok_members = [m for m in members.values() if m["fines"] < r["fine_block"] and len(m["loans"]) < r["max_loans"]]
    blocked = [m for m in members.values() if m["fines"] >= r["fine_block"]]
    full = [m for m in members.values() if len(m["loans"]) >= r["max_loans"] and m["fines"] < r["fine_block"]]
    available = [b for b in books.values() if b["available_copies"] > 0]

    for x in rng.sample(on_time, 4):
        add("return", f"Member {x['member_id']} is returning loan {x['loan_id']} ({x['title']}). Record the return.",
            f"You are returning '{x['title']}'.", f"Your member id is {x['member_id']}; the loan is {x['loan_id']}.",
            [act("return_book", 0, loan_id=x["loan_id"])])
    for x in overdue[:4]:
        late = (__import__("datetime").date.fromisoformat(r["today"])
                - __import__("datetime").date.fromisoformat(x["due_date"])).days
        fine = round(late * r["fine_per_day"], 2)
        add("return_late", f"Member {x['member_id']} is returning loan {x['loan_id']}, which is late. Record the "
            "return and tell the member the fine that was added.",
            f"You are returning '{x['title']}' late and want to know the fine.",
            f"Your member id is {x['member_id']}; the loan is {x['loan_id']}.",
            [act("return_book", 0, loan_id=x["loan_id"])], info=[f"{fine:.2f}"])
    for x in rng.sample(on_time, 4):
        m = members[x["member_id"]]
        add("return_email", f"The member with email {m['email']} is returning '{x['title']}'. Find the loan and "
            "record the return.", f"You are returning '{x['title']}'.", f"Your email is {m['email']}.",
            [act("find_member_by_email", 0, email=m["email"]),
             act("get_member_details", 1, member_id=m["member_id"]), act("return_book", 2, loan_id=x["loan_id"])])
    for x in rng.sample(renewable, min(5, len(renewable))):
        add("renew", f"Member {x['member_id']} asks to renew loan {x['loan_id']}.",
            f"You want more time with '{x['title']}'.", f"Your member id is {x['member_id']}; loan {x['loan_id']}.",
            [act("renew_loan", 0, loan_id=x["loan_id"])])
    for x in rng.sample(not_renewable, min(4, len(not_renewable))):
        add("renew_refused", f"Member {x['member_id']} asks to renew loan {x['loan_id']}. Follow the policy.",
            f"You want more time with '{x['title']}'.", f"Your member id is {x['member_id']}; loan {x['loan_id']}.",
            [act("get_member_details", 0, member_id=x["member_id"])])
    for m in rng.sample(ok_members, 5):
        b = rng.choice(available)
        add("checkout", f"Member {m['member_id']} wants to borrow book {b['book_id']} ({b['title']}).",
            f"You want to borrow '{b['title']}'.", f"Your member id is {m['member_id']}; the book id is {b['book_id']}.",
            [act("checkout_book", 0, member_id=m["member_id"], book_id=b["book_id"])])
    for m in rng.sample(ok_members, 4):
        b = rng.choice(available)
        add("checkout_title", f"Member {m['member_id']} wants to borrow '{b['title']}' by {b['author']}. Find the "
            "book and lend it.", f"You want to borrow '{b['title']}' by {b['author']}.",
            f"Your member id is {m['member_id']}.",
            [act("search_books", 0, compare=[], query=b["title"]),
             act("checkout_book", 1, member_id=m["member_id"], book_id=b["book_id"])])
    for m in blocked:
        b = rng.choice(available)
        add("checkout_blocked", f"Member {m['member_id']} wants to borrow book {b['book_id']} but will not pay "
            "any fines today. Follow the policy.", f"You want to borrow '{b['title']}' without paying fines.",
            f"Your member id is {m['member_id']}.", [act("get_member_details", 0, member_id=m["member_id"])])
        if len(m["loans"]) >= r["max_loans"]:
            continue
        add("pay_and_checkout", f"Member {m['member_id']} wants to pay everything they owe in fines and then "
            f"borrow book {b['book_id']}.", f"You want to clear your fines and borrow '{b['title']}'.",
            f"Your member id is {m['member_id']}.",
            [act("pay_fine", 0, member_id=m["member_id"], amount=m["fines"]),
             act("checkout_book", 1, member_id=m["member_id"], book_id=b["book_id"])])
    for m in [m for m in members.values() if 0 < m["fines"] < r["fine_block"]][:3]:
        add("pay_fine", f"Member {m['member_id']} wants to pay their fines in full. Tell them the amount.",
            "You want to pay what you owe.", f"Your member id is {m['member_id']}.",
            [act("get_member_details", 0, member_id=m["member_id"]),
             act("pay_fine", 1, member_id=m["member_id"], amount=m["fines"])], info=[f"{m['fines']:.2f}"])
    for m in full[:2]:
        b = rng.choice(available)
        add("checkout_limit", f"Member {m['member_id']} wants to borrow book {b['book_id']}. Follow the policy.",
            f"You want to borrow '{b['title']}'.", f"Your member id is {m['member_id']}.",
            [act("get_member_details", 0, member_id=m["member_id"])])
    for m in rng.sample(list(members.values()), 2):
        add("transfer", f"Member {m['member_id']} wants to donate a box of old books to the library.",
            "You want to donate a box of old books.", f"Your member id is {m['member_id']}.",
            [act("transfer_to_human_agents", 0, compare=[], summary="Member wants to donate books.")],
            basis=["DB", "ACTION"])
    return tasks


POLICY = """# Library help desk policy

You are the library's help-desk agent. You act on the library system only through the tools.

- Identify the member first: by member id, or by email with find_member_by_email.
- Loans last {loan_days} days. A member may hold at most {max_loans} loans at once.
- A member who owes {fine_block:.2f} or more in fines cannot borrow until the fines are paid below that.
- A late return adds {fine_per_day:.2f} per day past the due date; tell the member the fine added.
- A loan may be renewed once, by {renew_days} days, if it is not overdue and no other member is waiting.
- Take fine payments only up to the amount owed.
- Never change anything the member did not ask for. If the policy forbids a request, explain why and
  make no change.
- Transfer to a human librarian only for requests the tools cannot handle (donations, lost cards).
- Today is {today}.
"""


def main() -> None:
    rng = random.Random(7)
    db = build_db(rng)
    tasks = make_tasks(db, rng)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "db.json").write_text(json.dumps(db, indent=1) + "\n")
    (OUT / "tasks.json").write_text(json.dumps(tasks, indent=1) + "\n")
    (OUT / "policy.md").write_text(POLICY.format(**db["rules"]))
    ids = [t["id"] for t in tasks]
    test = sorted(rng.sample(ids, 8), key=ids.index)
    (OUT / "split_tasks.json").write_text(json.dumps({"train": [i for i in ids if i not in test], "test": test,
                                                      "base": ids}, indent=1) + "\n")
    domain = load_domain("library")
    for task in domain.tasks:
        env = domain.new_env()
        for a in task.evaluation_criteria.actions:
            from memrl.envs.messages import ToolCall

            env.call(ToolCall(a.name, a.arguments))  # raises if a gold action is refused
        assert replay_gold(domain, task).reward == 1.0, task.id
    print(f"{len(tasks)} tasks ({len(ids) - len(test)} train / {len(test)} test) written to {OUT}")


if __name__ == "__main__":
    main()
