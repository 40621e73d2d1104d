"""Unit tests of tools/mutate.py's bookkeeping (issue 13): equivalents that
follow their source line, and the verdict of a simulator that refuses its
input. Python 3 standard library only: python3 tests/mutate_tool_test.py
"""
import os
import sys
import types
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import mutate  # noqa: E402

SOURCE = """static int f(int a, int b) {
  if (a < b) return 1;
  return 0;
}

static int g(int a, int b) {
  if (a < b) return 1;
  return 2;
}
"""


def mutants_of(text):
    return [m for m in mutate.generate("src/core/x.c", text)]


class EquivalentsTest(unittest.TestCase):
    def setUp(self):
        self.notes = []

    def match(self, text, entries):
        mutants = mutants_of(text)
        return mutate.match_equivalents(entries, mutants, {"src/core/x.c": text}, self.notes), mutants

    def ror_at(self, mutants, line):
        return [m for m in mutants if m.line == line and m.op == "ror" and m.index == 0][0]

    def test_exact_id_and_line(self):
        _, mutants = self.match(SOURCE, [])
        m = self.ror_at(mutants, 3 - 1)  # `if (a < b)` of f, line 2
        eq, _ = self.match(SOURCE, [(m.id, "f", "  if (a < b) return 1;", "why")])
        # The line's text is in the file twice (f and g): the exact id decides.
        self.assertEqual(eq, {m.id: "why"})
        self.assertEqual(self.notes, [])

    def test_entry_follows_a_moved_line(self):
        _, mutants = self.match(SOURCE, [])
        m = [x for x in mutants if x.line == 3 and x.op == "ret"][0]  # `return 0;` of f
        moved = "/* a comment above */\n" + SOURCE
        eq, moved_mutants = self.match(moved, [(m.id, "f", "  return 0;", "why")])
        target = [x for x in moved_mutants if x.line == 4 and x.op == "ret" and x.index == m.index][0]
        self.assertEqual(eq, {target.id: "why"})

    def test_changed_line_stops_applying(self):
        _, mutants = self.match(SOURCE, [])
        m = [x for x in mutants if x.line == 3 and x.op == "ret"][0]
        changed = SOURCE.replace("  return 0;", "  return -1;")
        eq, _ = self.match(changed, [(m.id, "f", "  return 0;", "why")])
        self.assertEqual(eq, {})
        self.assertEqual(len(self.notes), 1)
        self.assertIn(m.id, self.notes[0])

    def test_same_line_in_another_function_is_not_taken(self):
        _, mutants = self.match(SOURCE, [])
        m = self.ror_at(mutants, 2)  # f's `if (a < b)`
        # f's line moves down by 5 lines: g's identical line now sits at f's old line number.
        moved = SOURCE.replace("static int f(int a, int b) {\n", "static int f(int a, int b) {\n\n\n\n\n\n")
        g_first = "static int g(int a, int b) {\n  if (a < b) return 1;\n  return 2;\n}\n\n"
        moved = g_first + moved.replace("\nstatic int g(int a, int b) {\n  if (a < b) return 1;\n  return 2;\n}\n", "")
        eq, moved_mutants = self.match(moved, [(m.id, "f", "  if (a < b) return 1;", "why")])
        target = [x for x in moved_mutants if x.func == "f" and x.op == "ror" and x.index == 0]
        self.assertEqual(len(target), 1)
        self.assertEqual(eq, {target[0].id: "why"})  # f's line, wherever it went; never g's at the old number

    def test_renamed_function_stops_applying(self):
        _, mutants = self.match(SOURCE, [])
        m = self.ror_at(mutants, 2)
        eq, _ = self.match(SOURCE.replace("static int f(", "static int h("), [(m.id, "f", "  if (a < b) return 1;", "w")])
        self.assertEqual(eq, {})
        self.assertIn(m.id, self.notes[0])


class VerdictTest(unittest.TestCase):
    def worker(self, no_baseline):
        w = mutate.Worker.__new__(mutate.Worker)
        w.args = types.SimpleNamespace(no_baseline=no_baseline, timeout=1, seeds=1)
        return w

    def test_refused_input_after_a_baseline_is_a_kill(self):
        r = {}
        self.assertTrue(self.worker(False).verdict(r, 2, "plan x: line 1: bad\n", "plan x.plan"))
        self.assertEqual((r["status"], r["kind"]), ("killed", "refused input"))

    def test_refused_input_without_a_baseline_is_a_tool_error(self):
        with self.assertRaises(RuntimeError):
            self.worker(True).verdict({}, 2, "usage", "seeds")

    def test_a_pass_decides_nothing(self):
        r = {}
        self.assertFalse(self.worker(False).verdict(r, 0, "2000 passed, 0 failed\n", "seeds"))
        self.assertEqual(r, {})


class ResumeTest(unittest.TestCase):
    """--resume: verdicts of the journal are reused only for the same mutant on the same source."""

    def setUp(self):
        import tempfile
        self.dir = tempfile.mkdtemp()
        self.texts = {"src/core/x.c": SOURCE}
        self.mutants = mutants_of(SOURCE)

    def tearDown(self):
        import shutil
        shutil.rmtree(self.dir)

    def args(self, rerun=False, seeds=2000, no_unit=False):
        return types.SimpleNamespace(resume=True, rerun_survivors=rerun, out=self.dir, quiet=True, seeds=seeds,
                                     no_unit=no_unit)

    def journal(self, rows, tail=""):
        import json
        with open(os.path.join(self.dir, "journal.jsonl"), "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
            f.write(tail)

    def row(self, m, status, text=SOURCE, **extra):
        r = {"id": m.id, "file": m.path, "desc": m.desc, "status": status, "src_sha": mutate.src_sha(text)}
        r.update(extra)
        return r

    def test_no_journal_runs_everything(self):
        reused, queue = mutate.resume_split(self.args(), self.mutants, self.texts)
        self.assertEqual((reused, queue), ([], self.mutants))

    def test_same_source_reused_other_source_run_again(self):
        a, b, c = self.mutants[0], self.mutants[1], self.mutants[2]
        self.journal([self.row(a, "killed"), self.row(b, "killed", SOURCE + "\n"), self.row(c, "survived")],
                     tail='{"id": "cut off')
        reused, queue = mutate.resume_split(self.args(), self.mutants, self.texts)
        self.assertEqual(sorted(r["id"] for r in reused), sorted([a.id, c.id]))
        self.assertIn(b, queue)
        self.assertNotIn(a, queue)
        self.assertEqual(len(reused) + len(queue), len(self.mutants))

    def test_rerun_survivors(self):
        a, c = self.mutants[0], self.mutants[2]
        self.journal([self.row(a, "killed"), self.row(c, "survived")])
        reused, queue = mutate.resume_split(self.args(rerun=True), self.mutants, self.texts)
        self.assertEqual([r["id"] for r in reused], [a.id])
        self.assertIn(c, queue)

    def test_other_settings_or_mutant_run_again(self):
        a, b, c = self.mutants[0], self.mutants[1], self.mutants[2]
        self.journal([self.row(a, "killed", judged_under={"seeds": 300, "no_unit": False}),
                      self.row(b, "killed", desc="another mutant under this id"),
                      self.row(c, "killed", judged_under={"seeds": 2000, "no_unit": False})])
        reused, queue = mutate.resume_split(self.args(), self.mutants, self.texts)
        self.assertEqual([r["id"] for r in reused], [c.id])
        reused, _ = mutate.resume_split(self.args(seeds=300), self.mutants, self.texts)
        self.assertEqual([r["id"] for r in reused], [a.id])

    def test_timeouts_judged_again_with_survivors(self):
        a = self.mutants[0]
        self.journal([self.row(a, "killed", kind="timeout")])
        self.assertEqual(len(mutate.resume_split(self.args(), self.mutants, self.texts)[0]), 1)
        self.assertEqual(mutate.resume_split(self.args(rerun=True), self.mutants, self.texts)[0], [])

    def test_lines_that_are_no_verdict_are_ignored(self):
        a = self.mutants[0]
        self.journal([[1, 2], {"id": a.id}, self.row(a, "killed")], tail="17\n")
        reused, _ = mutate.resume_split(self.args(), self.mutants, self.texts)
        self.assertEqual([r["id"] for r in reused], [a.id])

    def test_a_cut_off_line_does_not_swallow_the_next_verdict(self):
        a, b = self.mutants[0], self.mutants[1]
        import json
        self.journal([self.row(a, "killed")], tail=json.dumps(self.row(b, "killed")))  # no final newline
        with mutate.open_journal(self.args()) as f:
            f.write(json.dumps(self.row(self.mutants[2], "killed")) + "\n")
        reused, _ = mutate.resume_split(self.args(), self.mutants, self.texts)
        self.assertEqual(sorted(r["id"] for r in reused), sorted([a.id, b.id, self.mutants[2].id]))

    def test_later_verdict_wins(self):
        a = self.mutants[0]
        self.journal([self.row(a, "survived"), self.row(a, "killed")])
        reused, _ = mutate.resume_split(self.args(), self.mutants, self.texts)
        self.assertEqual([r["status"] for r in reused], ["killed"])


if __name__ == "__main__":
    unittest.main()
