"""Unit tests of the crew's checks (no model, no server): python -m unittest test_guards"""

import unittest

import guards
from guards import RouterError, RouterOutput


class RouterAnswer(unittest.TestCase):
    def test_plain_and_fenced_json_parse_alike(self):
        plain = '{"chapters": ["3.4", "3.5"], "confidence": 0.9, "reason": "r"}'
        for text in (plain, f"```json\n{plain}\n```", f"  ```\n{plain}```  "):
            self.assertEqual(guards.parse_router(text).chapters, ["3.4", "3.5"], text)

    def test_prose_is_refused_with_what_to_do(self):
        with self.assertRaises(RouterError) as e:
            guards.parse_router("Chapter 3.4 looks right.")
        self.assertIn("not JSON", str(e.exception))
        self.assertIn('"chapters"', str(e.exception))

    def test_the_contract_is_checked(self):
        bad = [
            '{"chapters": [], "confidence": 0.9, "reason": "r"}',
            '{"chapters": ["1", "2", "3", "4"], "confidence": 0.9, "reason": "r"}',
            '{"chapters": ["3.4"], "confidence": 1.5, "reason": "r"}',
            '{"chapters": ["Installing"], "confidence": 0.5, "reason": "r"}',
            '{"chapters": ["3.4"], "confidence": 0.5}',
            '["3.4"]',
        ]
        for text in bad:
            with self.assertRaises(RouterError, msg=text):
                guards.parse_router(text)


class Widening(unittest.TestCase):
    def route(self, chapters, confidence):
        return RouterOutput(chapters=chapters, confidence=confidence, reason="r")

    def test_sure_routes_stay(self):
        self.assertEqual(guards.widen(self.route(["3.4.1", "5"], 0.7)), ["3.4.1", "5"])

    def test_unsure_sections_widen_to_their_parents_once(self):
        self.assertEqual(guards.widen(self.route(["3.4.1", "3.4.2", "5"], 0.4)), ["3.4", "5"])
        self.assertEqual(guards.widen(self.route(["3.4", "3"], 0.69)), ["3"])

    def test_scope(self):
        self.assertTrue(guards.within("3.4.1", "3.4"))
        self.assertTrue(guards.within("3.4", "3.4"))
        self.assertFalse(guards.within("3.40", "3.4"))
        self.assertFalse(guards.within("3", "3.4"))


class Citations(unittest.TestCase):
    def test_both_styles_are_found_in_order_once(self):
        text = "Use --bwlimit [chapter 90.10.5]. See 【章节 3.4】 and [Chapter 90.10.5] again."
        self.assertEqual(guards.citations(text), ["90.10.5", "3.4"])

    def test_language_picks_the_style(self):
        self.assertTrue(guards.is_chinese("如何限制带宽？"))
        self.assertFalse(guards.is_chinese("How do I limit bandwidth with --bwlimit?"))
        self.assertEqual(guards.citation("3.4", True), "【章节 3.4】")
        self.assertEqual(guards.citation("3.4", False), "[chapter 3.4]")


if __name__ == "__main__":
    unittest.main()
