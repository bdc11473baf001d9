"""Tasks for the tools demo: many small help-desk tickets on the built-in ``library`` database.

The bundled library domain has 42 tasks, 8 of them in its test split: one more
solved task moves held-out success by 12.5 points, too coarse to show a lift.
The demo therefore writes its own copy of the domain (same database, policy and
tools) with tickets generated from the database: every (member, loan, book)
combination a kind of request allows, in two phrasings. A seeded shuffle puts a
fixed number of each kind in the test split; no test ticket is trained on (the
same ids occur in both splits, in other combinations or phrasings).

Kinds (gold actions in brackets; reward basis DB, plus COMMUNICATE where the
ticket asks to tell an amount):

- ``return``: a loan id is given [return_book]
- ``renew``: a loan that may be renewed [renew_loan]
- ``checkout``: a book id is given [checkout_book]
- ``title``: only title and author [search_books, checkout_book]
- ``email``: only the member's email and the title [find_member_by_email, get_member_details, return_book]
- ``pay``: pay all fines and say the amount [get_member_details, pay_fine]
"""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

KINDS = ("return", "renew", "checkout", "title", "email", "pay")
TEMPLATES: dict[str, tuple[str, str]] = {
    "return": ("Member {m} is returning loan {l} ({title}). Record the return.",
               "Please check in loan {l} for member {m}; the book is back."),
    "renew": ("Member {m} asks to renew loan {l}.",
              "Member {m} would like more time with loan {l}. Please renew it."),
    "checkout": ("Member {m} wants to borrow book {b} ({title}).",
                 "Please lend book {b} to member {m}."),
    "title": ("Member {m} wants to borrow '{title}' by {author}. Find the book and lend it.",
              "Member {m} is looking for '{title}' by {author}. Find it and check it out to them."),
    "email": ("The member with email {email} is returning '{title}'. Find the loan and record the return.",
              "Someone with email {email} brought back '{title}'. Look up the loan and record the return."),
    "pay": ("Member {m} wants to pay their fines in full. Tell them the amount.",
            "Member {m} would like to clear all fines today. Tell them how much was paid."),
}


@dataclass(frozen=True)
class TaskPlan:
    """One generated ticket: its gold calls and, for ``pay``, the amount the agent must say."""

    id: str
    kind: str
    ticket: str
    calls: list[tuple[str, dict[str, Any]]]
    say: list[str] = field(default_factory=list)

    def to_task(self) -> dict[str, Any]:
        """The ticket in τ²-bench's task layout (solo mode: the ticket is the agent's first message)."""
        crit: dict[str, Any] = {
            "actions": [{"action_id": f"{name}_{i}", "name": name, "arguments": args}
                        for i, (name, args) in enumerate(self.calls)],
            "reward_basis": ["DB", "COMMUNICATE"] if self.say else ["DB"]}
        if self.say:
            crit["communicate_info"] = list(self.say)
        return {"id": self.id, "description": {"purpose": self.kind}, "ticket": self.ticket,
                "evaluation_criteria": crit}


def library_files() -> Path:
    """The bundled library domain folder (database, policy, tools' home)."""
    return Path(str(resources.files("memrl.envs.domains") / "library"))


def _can_borrow(member: dict[str, Any], rules: dict[str, Any]) -> bool:
    return member["fines"] < rules["fine_block"] and len(member["loans"]) < rules["max_loans"]


def _renewable(loan: dict[str, Any], db: dict[str, Any]) -> bool:
    r = db["rules"]
    return (loan["renewals"] < r["max_renewals"] and loan["due_date"] >= r["today"]
            and not db["books"][loan["book_id"]]["holds"])


# The demo's cast: six members who may borrow (three owe small fines, five hold a renewable loan) and
# the first five books on the shelf. A tiny model learns to copy one of a handful of ids within a
# warm start of a few minutes; test tickets are other combinations and phrasings of the same ids.
DEMO_MEMBERS = ("M002", "M003", "M006", "M007", "M011", "M014")
DEMO_BOOKS = 5


def plans(db: dict[str, Any], members_only: tuple[str, ...] | None = None,
          books_only: int | None = None) -> list[TaskPlan]:
    """Every ticket the database allows (for ``members_only`` and the first ``books_only`` available
    books, when given), in a fixed order (kind, then ids, then phrasing)."""
    rules, members, books, loans = db["rules"], db["members"], db["books"], db["loans"]
    if members_only is not None:
        members = {k: v for k, v in members.items() if k in members_only}
        loans = {k: v for k, v in loans.items() if v["member_id"] in members_only}
    out: list[TaskPlan] = []

    def add(kind: str, key: str, calls: list[tuple[str, dict[str, Any]]], say: list[str] | None = None,
            **fields: Any) -> None:
        for v, template in enumerate(TEMPLATES[kind]):
            out.append(TaskPlan(f"{kind}_{key}_{v}", kind, template.format(**fields), calls, say or []))

    active = [ln for ln in loans.values() if ln["status"] == "active"]
    for ln in active:
        add("return", ln["loan_id"], [("return_book", {"loan_id": ln["loan_id"]})],
            m=ln["member_id"], l=ln["loan_id"], title=ln["title"])
    for ln in active:
        if _renewable(ln, db):
            add("renew", ln["loan_id"], [("renew_loan", {"loan_id": ln["loan_id"]})],
                m=ln["member_id"], l=ln["loan_id"])
    lenders = [m for m in members.values() if _can_borrow(m, rules)]
    shelf = [b for b in books.values() if b["available_copies"] > 0][:books_only]
    for m in lenders:
        for b in shelf:
            args = {"member_id": m["member_id"], "book_id": b["book_id"]}
            add("checkout", f"{m['member_id']}_{b['book_id']}", [("checkout_book", args)],
                m=m["member_id"], b=b["book_id"], title=b["title"])
    for m in lenders:
        for b in shelf:
            if sum(b["title"] == o["title"] for o in books.values()) != 1:
                continue
            args = {"member_id": m["member_id"], "book_id": b["book_id"]}
            add("title", f"{m['member_id']}_{b['book_id']}",
                [("search_books", {"query": b["title"]}), ("checkout_book", args)],
                m=m["member_id"], title=b["title"], author=b["author"])
    for ln in active:
        m = members[ln["member_id"]]
        if sum(db["loans"][x]["title"] == ln["title"] for x in m["loans"]) != 1:
            continue  # the title must name one loan of the member
        add("email", ln["loan_id"], [("find_member_by_email", {"email": m["email"]}),
                                     ("get_member_details", {"member_id": m["member_id"]}),
                                     ("return_book", {"loan_id": ln["loan_id"]})],
            email=m["email"], title=ln["title"])
    for m in members.values():
        if m["fines"] > 0:
            add("pay", m["member_id"], [("get_member_details", {"member_id": m["member_id"]}),
                                        ("pay_fine", {"member_id": m["member_id"], "amount": m["fines"]})],
                say=[f"{m['fines']:.2f}"], m=m["member_id"])
    return out


def split(all_plans: list[TaskPlan], seed: int, test_per_kind: int,
          train_per_kind: int) -> tuple[list[TaskPlan], list[TaskPlan]]:
    """Seeded train/test split with at most ``test_per_kind`` test tickets per kind (never more than a
    third of the kind) and at most ``train_per_kind`` training tickets per kind (keeps kinds balanced)."""
    rng = random.Random(seed)
    train: list[TaskPlan] = []
    test: list[TaskPlan] = []
    for kind in KINDS:
        group = [p for p in all_plans if p.kind == kind]
        rng.shuffle(group)
        n_test = min(test_per_kind, len(group) // 3)
        test += group[:n_test]
        train += group[n_test:n_test + train_per_kind]
    return train, test


def write_domain(folder: Path, seed: int, test_per_kind: int = 8, train_per_kind: int = 24,
                 members_only: tuple[str, ...] | None = DEMO_MEMBERS,
                 books_only: int | None = DEMO_BOOKS) -> tuple[list[TaskPlan], list[TaskPlan]]:
    """Write ``folder/library`` (the bundled database and policy, generated tasks and a train/test split)
    for ``env.data_dir=folder``; returns the (train, test) plans."""
    src = library_files()
    db = json.loads((src / "db.json").read_text())
    train, test = split(plans(db, members_only, books_only), seed, test_per_kind, train_per_kind)
    dest = folder / "library"
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("db.json", "policy.md"):
        shutil.copyfile(src / name, dest / name)
    (dest / "tasks.json").write_text(json.dumps([p.to_task() for p in train + test], indent=1))
    (dest / "split_tasks.json").write_text(json.dumps({"train": [p.id for p in train],
                                                       "test": [p.id for p in test]}, indent=1))
    return train, test


def read_plans(folder: Path) -> tuple[list[TaskPlan], list[TaskPlan]]:
    """The (train, test) plans a :func:`write_domain` folder holds (a resumed demo reads them back)."""
    dest = folder / "library"
    by_id = {t["id"]: t for t in json.loads((dest / "tasks.json").read_text())}
    splits = json.loads((dest / "split_tasks.json").read_text())

    def plan(t: dict[str, Any]) -> TaskPlan:
        crit = t["evaluation_criteria"]
        return TaskPlan(t["id"], t["description"]["purpose"], t["ticket"],
                        [(a["name"], a["arguments"]) for a in crit["actions"]], crit.get("communicate_info", []))

    return ([plan(by_id[i]) for i in splits["train"]], [plan(by_id[i]) for i in splits["test"]])
