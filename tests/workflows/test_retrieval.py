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
