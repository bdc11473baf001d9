import math

from memrl.workflows.retrieval import TfidfIndex


def test_tfidf_by_hand():
    idx = TfidfIndex()
    idx.add("paris france")  # doc 0
    idx.add("berlin germany")  # doc 1
    # N=2; every word has df=1 -> idf = ln(3/2)+1 for all; query 'paris' matches only doc 0.
    # doc0 vector: 0.5*idf for both words -> cosine with [idf] on 'paris' = 0.5 / sqrt(0.5) = 1/sqrt(2)
    s = idx.scores("paris")
    assert math.isclose(s[0], 1 / math.sqrt(2)) and s[1] == 0.0
    assert idx.top1("Where is PARIS?") == (0, s[0])  # case-insensitive, extra words ignored
    assert idx.top1("tokyo") is None


def test_rare_words_weigh_more():
    idx = TfidfIndex()
    idx.add("the key is blue")
    idx.add("the key is red")
    idx.add("the door is red")
    best, _ = idx.top1("blue key")
    assert best == 0


class SpaceTokenizer:
    """Byte-level-BPE-like pieces: words, the ones after a space marked with 'Ġ'."""

    def tokenize(self, text):
        first, *rest = text.split(" ")
        return [first] + ["\u0120" + w for w in rest]


def test_subword_terms_drop_the_space_marker(tiny_model):
    from memrl.workflows.retrieval import subword_terms

    _, tok = tiny_model
    assert subword_terms(SpaceTokenizer(), "Paris and paris") == ["paris", "and", "paris"]
    terms = subword_terms(tok, "the capital, the CAPITAL")
    assert terms == [p.replace("\u0120", "") for p in tok.tokenize("the capital, the capital")]
    assert all("\u0120" not in t for t in terms) and terms.count("capital") == 2


def test_released_index_by_hand():
    from memrl.workflows.retrieval import SubwordTfidfIndex

    idx = SubwordTfidfIndex(SpaceTokenizer())
    assert idx.top1("paris") is None  # no memories yet
    assert idx.add("a b") == 0 and idx.add("a c") == 1
    assert idx.add("a b") == 0 and len(idx) == 2  # identical memories are stored once
    # N=2, df(a)=2, df(b)=df(c)=1: idf(a) = ln(3/3)+1 = 1, idf(b) = idf(c) = ln(3/2)+1 = 1.405465
    # query 'a b' = doc 0 -> cosine 1; doc 1 shares only 'a': 1*1 / (1 + 1.405465^2) = 0.336097
    s = idx.scores("a b")
    assert math.isclose(s[0], 1.0) and math.isclose(s[1], 1 / (1 + (math.log(1.5) + 1) ** 2))
    assert math.isclose(s[1], 0.336097, abs_tol=1e-6)
    assert idx.top1("A B") == (0, s[0])  # lower-cased
    # query 'c' = (c: 1.405465); doc 1 = (a: 1, c: 1.405465), norm sqrt(2.975332) = 1.724915
    best, score = idx.top1("c")
    assert best == 1 and math.isclose(score, 1.405465 / 1.724915, abs_tol=1e-6)
    # no threshold: all scores 0 still returns a memory (ties: the most recent one)
    assert idx.top1("tokyo") == (1, 0.0)
    assert idx.top1("") is None and idx.top1(None) is None


def test_released_index_without_terms_returns_nothing(tiny_model):
    from memrl.workflows.retrieval import SubwordTfidfIndex

    idx = SubwordTfidfIndex(tiny_model[1])
    idx.add("")
    assert idx.top1("paris") is None
