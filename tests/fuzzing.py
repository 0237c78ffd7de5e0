"""The loop of the seeded fuzz tests (tests/test_matmul_fuzz.py, tests/test_fused_fuzz.py)."""


def run_seeded(torch, draw, run_case, cases, seed, label):
    """Run ``run_case(torch, draw(seed + i))`` for ``cases`` seeds, collecting failures (up to
    ten, each naming its seed); fail with all of them, or if fewer than 90% of the cases had a
    nonzero reference (``run_case`` returns whether its reference had a nonzero value)."""
    nonzero, failures = 0, []
    for i in range(cases):
        c = draw(seed + i)
        try:
            nonzero += run_case(torch, c)
        except Exception as e:  # collect, then report every failing seed
            failures.append(f"seed {c['seed']}: {type(e).__name__}: {e}")
            if len(failures) >= 10:
                break
    print(f"{label}: {cases} cases from seed {seed}, {len(failures)} failed, {nonzero} with a nonzero reference")
    assert not failures, "replay with NBWGMMA_FUZZ_SEED=<seed> NBWGMMA_FUZZ_CASES=1:\n" + "\n".join(failures)
    assert nonzero >= cases * 0.9
