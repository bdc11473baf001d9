"""MemAgent as an ordinary program: plain openai SDK, no memrl import.

It reads the document chunk by chunk, rewrites its memory (a variable of its own) after each
chunk, and answers from the memory alone. Every call is a new prompt, so memrl records each
as its own conversation of the episode. Runs against any OpenAI-compatible server too.
"""

import os

MODEL = os.environ.get("MEMRL_MODEL", "gpt-4o-mini")
CHUNK_CHARS = 400

UPDATE = """You are reading a document piece by piece to answer a question.
Question: {question}
Memory so far: {memory}
New piece: {chunk}
Rewrite the memory, keeping everything that helps answer the question."""

ANSWER = """Question: {question}
Memory: {memory}
Answer from the memory, with the answer in \\boxed{{}}."""


async def ask(client, prompt: str, max_tokens: int) -> str:
    r = await client.chat.completions.create(model=MODEL, max_tokens=max_tokens,
                                             messages=[{"role": "user", "content": prompt}])
    return r.choices[0].message.content or ""


async def memagent(client, sample: dict) -> dict:
    doc, question = sample["context"], sample["question"]
    chunks = [doc[i:i + CHUNK_CHARS] for i in range(0, len(doc), CHUNK_CHARS)]
    memory = "nothing yet"
    for chunk in chunks:
        memory = await ask(client, UPDATE.format(question=question, memory=memory, chunk=chunk), 256)
    answer = await ask(client, ANSWER.format(question=question, memory=memory), 64)
    found = any(gold.lower() in answer.lower() for gold in sample["answers"])
    return {"reward": float(found), "metrics": {"chunks": len(chunks)}}
