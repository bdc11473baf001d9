"""Raw material for the RULER-style suite: word lists, needle values and haystack text.

RULER draws needle keys from the ``wonderwords`` adjective and noun lists and
fills its "essay" haystack with Paul Graham essays. Neither ships offline, so
memrl carries its own short word lists and a seeded generator of essay-like
prose (grammatical sentences on everyday topics, no facts to retrieve). A user
who wants real prose passes a text file instead (``--essay FILE``): its
sentences are then read in order from a random starting point.

Every function takes a ``random.Random``: the same seed gives the same text.
"""

from __future__ import annotations

import random
import re
import string
import uuid
from pathlib import Path

from memrl.io.text_files import read_json_or_lines, read_text

ADJECTIVES = tuple("""
able absent acidic active agile alert amber ample ancient angry arctic arid ashen awake bald bare basic bitter
black bland blue bold bouncy brave brief bright brisk broad broken brown busy calm candid careful cheap cheerful
chilly civil clean clear clever cloudy coarse cold common cosmic crisp cruel curly curved damp dark dear deep
dense dizzy dry dusty eager early earnest easy elated empty equal exact faint fair false famous fancy fast
fierce firm flat fluffy fond foggy formal fragile free fresh frozen funny gentle giant gifted glad glossy golden
grand grassy great green grim gritty hairy happy hardy harsh hasty heavy hidden hollow honest humble hungry icy
idle immense jolly keen kind lame large late lazy leafy lean legal level light limp little lively lofty lonely
long loose loud loyal lucky lush mad magic major mellow merry mild minor misty modern moist muddy mute narrow
neat nervous new nimble noble noisy odd olive open orange oval pale perfect pink plain plump polite poor proud
purple quick quiet rapid rare raw ready red rich rigid ripe robust rosy rough round royal rusty sad safe salty
sandy scarlet serene sharp shiny short shy silent silky silver simple sleepy slim slow small smart smooth snowy
soft solid sour spare spicy stable steady steep sticky stiff stormy strict strong sturdy sunny super sweet swift
tall tame tender tense thick thin tidy tiny tired tough tricky true uneven upbeat urban vague valid vast violet
vivid warm wary weak wet white whole wicked wide wild windy wise witty wooden young zany zealous
""".split())

NOUNS = tuple("""
acorn actor airport album anchor angle ankle apple apron arch arena army arrow artist attic autumn avenue badge
bakery balcony ballet bamboo banana bandit banjo barn barrel basket beach beacon bean beard beetle bell bench
berry bicycle biscuit blanket blossom boat bonnet book border bottle boulder bracket branch bread breeze brick
bridge brook brush bucket buffalo bugle bundle butter button cabin cactus camel camera canal candle canoe canyon
captain carpet carrot castle cattle cave cedar cellar chair chalk channel cherry chess chimney circle citizen
clock cloud clover coast cobra coffee comet compass copper coral cottage cotton cousin crater crayon creek cricket
crown crystal cup curtain cushion daisy dancer desert diamond dinner doctor dolphin donkey door dragon drawer
drum eagle echo elbow engine falcon farmer feather fence ferry fiddle finger flame flute forest fossil fountain
fox galaxy garden garlic gate giraffe glacier glove goat grape guitar hammer harbor harp hazel helmet heron hill
honey horizon hotel island ivory jacket jungle kettle kitten ladder lagoon lantern lemon library lily lion lizard
lobster locket magnet mango maple marble meadow melon mirror monkey moon mountain mouse museum needle nest
ocean olive onion orchard otter owl paddle palace panda parrot peach pebble pencil pepper piano pillow pilot
pine planet plum pocket pond poppy potato prairie puppet quartz rabbit radio raven ribbon river robin rocket
saddle sailor salmon satchel scarf shadow shell shovel signal silver sketch sparrow spider spoon squirrel stable
statue stone storm stream sugar summer sunset swan table teapot temple thistle thunder tiger timber tomato tower
tractor trumpet tulip tunnel turtle umbrella valley velvet violin voyage wagon walnut wave whale whistle willow
window winter wizard wolf yacht zebra
""".split())

VERBS = tuple("""
admire arrive bake balance borrow build carry change climb collect cover cross dance deliver drift enjoy explore
fold follow gather glide guard hurry imagine invent jump kneel laugh listen measure mend notice observe offer
paint plant polish prepare protect pull question reach repair rescue return row sail scatter search settle shine
sketch slide sort spin stack steer stretch study swim teach travel trust visit wander wash whisper wonder write
""".split())

# The "repeat" haystack: one fixed, fact-free passage repeated (RULER's niah_single_1 and vt noise).
REPEATED_PASSAGE = ("The lake is still. The hills are far away. The wind moves slowly. "
                    "Nothing happens here. Morning turns into evening.")

_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"

_ESSAY_FRAMES = (
    "Most {noun}s are {adj} in the {season}, which is why people {verb} them with care.",
    "A {adj} {noun} rarely helps anyone {verb}, yet many still believe it does.",
    "When I first tried to {verb} near the {noun}, everything seemed {adj} and strange.",
    "The trouble with a {adj} {noun} is that nobody wants to {verb} it twice.",
    "It is easy to {verb} a {noun}; it is much harder to keep it {adj}.",
    "Some say the {noun} was never meant to be {adj}, only useful.",
    "In small towns the {noun} is often the most {adj} thing to {verb}.",
    "If you {verb} every day, even a {adj} {noun} starts to feel familiar.",
    "The best advice I ever got about the {noun} was to stay {adj} and {verb} slowly.",
    "Nobody remembers who first decided that a {noun} should be {adj}.",
    "People who {verb} for a living tend to notice when a {noun} turns {adj}.",
    "There is a {adj} kind of patience in learning to {verb} beside a {noun}.",
)
_SEASONS = ("spring", "summer", "autumn", "winter")


def random_number(rng: random.Random, digits: int = 7) -> str:
    """A ``digits``-digit decimal number without a leading zero (RULER's needle values)."""
    return str(rng.randint(10 ** (digits - 1), 10**digits - 1))


def random_word(rng: random.Random) -> str:
    """An ``adjective-noun`` compound, RULER's "words" needle type."""
    return f"{rng.choice(ADJECTIVES)}-{rng.choice(NOUNS)}"


def random_uuid(rng: random.Random) -> str:
    """A version-4 UUID drawn from ``rng`` (not ``uuid4``, which ignores seeds)."""
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def random_value(rng: random.Random, kind: str) -> str:
    """One needle key or value of a RULER type: ``words``, ``numbers`` or ``uuids``."""
    if kind == "numbers":
        return random_number(rng)
    if kind == "words":
        return random_word(rng)
    if kind == "uuids":
        return random_uuid(rng)
    raise ValueError(f"unknown needle type {kind!r}; expected words, numbers or uuids")


def distinct(rng: random.Random, kind: str, count: int, avoid: set[str] | None = None) -> list[str]:
    """``count`` different values of one type, none in ``avoid`` (keys must not collide)."""
    seen = set(avoid or ())
    out: list[str] = []
    while len(out) < count:
        v = random_value(rng, kind)
        if v not in seen:
            seen.add(v)
            out.append(v)
    return out


def essay_sentences(rng: random.Random, count: int) -> list[str]:
    """``count`` essay-like sentences: fluent filler with no retrievable facts."""
    out = []
    for _ in range(count):
        frame = rng.choice(_ESSAY_FRAMES)
        out.append(frame.format(noun=rng.choice(NOUNS), adj=rng.choice(ADJECTIVES), verb=rng.choice(VERBS),
                                season=rng.choice(_SEASONS)))
    return out


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def load_essay_sentences(path: str | Path) -> list[str]:
    """Sentences of a prose file: plain text, or JSONL/JSON records with a ``text`` field."""
    p = Path(path)
    texts: list[str] = []
    if p.suffix in (".jsonl", ".json"):
        rows = read_json_or_lines(p)
        rows = rows if isinstance(rows, list) else [rows]
        texts = [r["text"] for r in rows if isinstance(r, dict) and isinstance(r.get("text"), str)]
    else:
        texts = [read_text(p)]
    sentences = [s.strip() for t in texts for s in _SENTENCE_END.split(" ".join(t.split())) if s.strip()]
    if len(sentences) < 10:
        raise ValueError(f"--essay {p}: found only {len(sentences)} sentences; pass a longer prose file")
    return sentences


class EssaySource:
    """Sentences for the essay haystack: generated, or read in order from a user's prose."""

    def __init__(self, sentences: list[str] | None = None) -> None:
        self.sentences = sentences

    def take(self, rng: random.Random, count: int) -> list[str]:
        if not self.sentences:
            return essay_sentences(rng, count)
        start = rng.randrange(len(self.sentences))
        n = len(self.sentences)
        return [self.sentences[(start + i) % n] for i in range(count)]


def pseudo_words(rng: random.Random, count: int, avoid: set[str] | None = None) -> list[str]:
    """``count`` distinct pronounceable non-words (three consonant-vowel syllables)."""
    seen = set(avoid or ())
    out: list[str] = []
    while len(out) < count:
        w = "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(3))
        if w not in seen:
            seen.add(w)
            out.append(w)
    return out


def coded_words(rng: random.Random, count: int, length: int = 6) -> list[str]:
    """``count`` distinct random lowercase strings (RULER's FWE "coded words")."""
    seen: set[str] = set()
    out: list[str] = []
    while len(out) < count:
        w = "".join(rng.choices(string.ascii_lowercase, k=length))
        if w not in seen:
            seen.add(w)
            out.append(w)
    return out
