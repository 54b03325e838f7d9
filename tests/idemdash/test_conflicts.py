from idemdash.dashboard.conflicts import Difference, diff_requests


def test_identical_requests_have_no_differences():
    assert diff_requests({"a": 1, "b": [1, 2]}, {"b": [1, 2], "a": 1}) == []


def test_a_changed_nested_field_is_named_by_its_json_pointer():
    stored = {"amount": 100, "customer": {"id": "c1", "email": "a@x"}}
    rejected = {"amount": 100, "customer": {"id": "c1", "email": "b@x"}}
    assert diff_requests(stored, rejected) == [Difference("/customer/email", "changed", "a@x", "b@x")]


def test_added_and_removed_fields_and_array_items_are_told_apart():
    stored = {"items": [1, 2, 3], "note": "x"}
    rejected = {"items": [1, 5], "coupon": "FREE"}
    assert diff_requests(stored, rejected) == [
        Difference("/items/1", "changed", 2, 5),
        Difference("/items/2", "removed", 3, None),
        Difference("/note", "removed", "x", None),
        Difference("/coupon", "added", None, "FREE"),
    ]


def test_a_type_change_is_one_difference_even_when_values_look_equal():
    assert diff_requests({"n": 1}, {"n": True}) == [Difference("/n", "changed", 1, True)]
    assert diff_requests({"n": 1}, {"n": "1"}) == [Difference("/n", "changed", 1, "1")]


def test_keys_with_slashes_are_escaped_and_whole_documents_can_differ():
    assert diff_requests({"a/b": 1}, {"a/b": 2})[0].path == "/a~1b"
    assert diff_requests([1], {"a": 1}) == [Difference("/", "changed", [1], {"a": 1})]
    assert diff_requests(None, {"a": 1}) == [Difference("/", "changed", None, {"a": 1})]
