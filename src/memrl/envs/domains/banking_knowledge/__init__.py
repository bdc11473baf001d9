"""τ³-bench's ``banking_knowledge`` domain: a bank's customer service with a 698-document knowledge base.

The agent must find in the knowledge base what to do (the policies, and the names of the
*discoverable* tools it may unlock or hand to the customer) through the search tools of a
retrieval variant (BM25 ``KB_search``, regex ``grep``...), then act on the bank's database. Tasks
are graded as τ³ grades them: the final database (agent and user side, one shared bank) against
the gold actions replayed, plus gold actions themselves for the tasks whose basis is ACTION.

Modules: :mod:`.records` (database, look-ups, ids), :mod:`.agent_tools` and :mod:`.user_tools`
(visible tools), the discoverable tools in :mod:`.credit_tools`, :mod:`.credit_limits`,
:mod:`.bank_tools`, :mod:`.debit_cards`, :mod:`.debit_orders`, :mod:`.debit_disputes`;
:mod:`.retrieval` and :mod:`.variants` (search and prompts), :mod:`.domain` (loading, per-task envs).
"""

from __future__ import annotations

from memrl.envs.domains.banking_knowledge.agent_tools import KnowledgeTools
from memrl.envs.domains.banking_knowledge.domain import BankingKnowledgeDomain, banking_knowledge_domain
from memrl.envs.domains.banking_knowledge.user_tools import KnowledgeUserTools

__all__ = ["BankingKnowledgeDomain", "KnowledgeTools", "KnowledgeUserTools", "banking_knowledge_domain"]
