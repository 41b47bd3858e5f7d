import pytest

from nogradlab import exercises


def test_right_wrong_and_unanswered(capsys):
    ex = exercises.get("01.1")
    assert exercises.check("01.1", ex.answer()) is True
    assert "correct" in capsys.readouterr().out
    assert exercises.check("01.1", 42) is False
    assert "should be a function" in capsys.readouterr().out
    assert exercises.check("01.1", ...) is None
    assert "not answered" in capsys.readouterr().out


def test_an_answer_that_raises_is_feedback_not_a_traceback(capsys):
    def broken(model, x):
        raise RuntimeError("boom")

    assert exercises.check("01.1", broken) is False
    out = capsys.readouterr()
    assert "RuntimeError: boom" in out.out and "Traceback" not in out.out + out.err


def test_a_solution_that_fails_its_check_raises(monkeypatch):
    ex = exercises.get("01.1")
    monkeypatch.setattr(ex, "reference", lambda model, x: model(x))  # forgets no_grad
    with pytest.raises(exercises.ExerciseError, match="01.1"):
        exercises.solution("01.1")


def test_unknown_exercise_names_the_allowed_ids():
    with pytest.raises(ValueError, match="allowed: 01.1"):
        exercises.check("99.9", 1)


# ---------------------------------------------------------------------------------------- the bank


def _wrong_answer(ex, w):
    return w if ex.kind == "code" or not callable(w) else w()


@pytest.mark.integration
@pytest.mark.parametrize("ex", exercises.all_exercises(), ids=lambda e: e.id)
def test_every_reference_solution_passes_silently(ex, capsys):
    exercises.solution(ex.id)
    assert capsys.readouterr().out == ""  # Run All prints nothing for a solution


@pytest.mark.integration
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
