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


# ---------------------------------------------------------------------------------------- the bank


def _wrong_answer(ex, w):
    return w if ex.kind == "code" or not callable(w) else w()


@pytest.mark.parametrize("ex", exercises.all_exercises(), ids=lambda e: e.id)
def test_every_reference_solution_passes_silently(ex, capsys):
    exercises.solution(ex.id)
    assert capsys.readouterr().out == ""  # Run All prints nothing for a solution


@pytest.mark.parametrize("ex", exercises.all_exercises(), ids=lambda e: e.id)
def test_every_check_rejects_plausible_wrong_answers_each_with_its_own_message(ex, capsys):
    assert len(ex.wrong) >= 2, f"exercise {ex.id} names fewer than two plausible wrong answers"
    msgs = []
    for w, fragment in ex.wrong:
        assert exercises.check(ex.id, _wrong_answer(ex, w)) is False
        out = capsys.readouterr()
        assert fragment in out.out and "Traceback" not in out.out + out.err, (ex.id, fragment, out.out)
        msgs.append(out.out)
    assert len(set(msgs)) == len(msgs), f"exercise {ex.id}: two wrong answers get the same message"
    assert exercises.check(ex.id, ...) is None


def test_a_coroutine_answer_gets_a_message_not_a_warning(capsys, recwarn):
    async def handler():
        return 1

    ex = exercises.all_exercises()[0]
    assert exercises.check(ex.id, handler()) is False
    out = capsys.readouterr()
    assert "coroutine" in out.out and "Traceback" not in out.err
    assert not [w for w in recwarn if "never awaited" in str(w.message)]
