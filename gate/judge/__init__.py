"""LLM-as-judge parts of the judge tier: pure, with no session or tier imports.

* :mod:`gate.judge.normalize` — style normalization applied to both responses;
* :mod:`gate.judge.template` — the project's judge prompts (files a team can replace);
* :mod:`gate.judge.protocol` — verdict parsing, both orders, swap-consistency,
  two-judge disagreement and the validity override;
* :mod:`gate.judge.elo` — win rate, Elo delta, bootstrap CI, one-sided test,
  round robin (Bradley-Terry) and transitivity;
* :mod:`gate.judge.cache` — the on-disk cache of judge calls and their counters;
* :mod:`gate.judge.buckets` — length buckets of prompts and generations;
* :mod:`gate.judge.judges` — the :class:`~gate.judge.judges.Judge` protocol and the
  in-process transformers judge;
* :mod:`gate.judge.damage` / :mod:`gate.judge.pairs` — damaged replies and labelled
  pairs with a known truth, for training and evaluating a judge.

The methods rest on two published approaches to judging efficient models: the Elo
framework for efficiency techniques of Keon et al. (Meta AI), which scores builds by
pairwise LLM-as-judge comparisons on real chat prompts with an output-validity check,
an Elo delta, token-length buckets and a transitivity check across builds; and the
compression-leaderboard methodology that uses two judges from different model
families, swap-consistency, style normalization and a disagreement-based stability
gate.
"""
