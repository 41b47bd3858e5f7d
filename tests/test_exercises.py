import pytest

from nogradlab import exercises


def test_right_wrong_and_unanswered(capsys):
    assert exercises.check("1", 3, lambda a: a == 3) is True
    assert "correct" in capsys.readouterr().out
    assert exercises.check("1", 4, lambda a: a == 3, hint="three") is False
    assert "Hint: three" in capsys.readouterr().out
    assert exercises.check("1", ..., lambda a: a == 3) is None
    assert "not answered" in capsys.readouterr().out


def test_a_test_that_raises_is_feedback_not_a_traceback(capsys):
    assert exercises.check("2", "x", lambda a: a.grad_fn is None) is False
    assert "AttributeError" in capsys.readouterr().out


def test_strict_raises_for_solutions():
    with pytest.raises(exercises.ExerciseError, match="[Ee]xercise 3"):
        exercises.check("3", 1, lambda a: a == 2, strict=True)
    with pytest.raises(exercises.ExerciseError):
        exercises.check("3", ..., lambda a: True, strict=True)
    assert exercises.check("3", 2, lambda a: a == 2, strict=True) is True


def test_test_must_be_callable():
    with pytest.raises(TypeError, match="must be a function"):
        exercises.check("4", 1, True)
