"""The autograder: ``check("ex03_tiled_forward")`` grades a learner's exercise module.

``check`` loads the module from ``exercises/`` (or ``exercises_dir=``, or the folder named by
FLASHLAB_EXERCISES_DIR), runs public then hidden randomised cases in a separate process with a
time limit per case, judges them here against flashlab's reference functions, and returns a
:class:`Report` (HTML in Jupyter, text when printed). ``flashlab grade`` is the command-line front
end. Exercise ids: ``flashlab.grading.registry.EXERCISES``. Names load on first use, so the
grading child (:mod:`flashlab.grading.child`) imports none of the grader's bookkeeping.
"""
from flashlab._lazy import lazy_exports

_EXPORTS = {"check": "checks", "find_exercises_dir": "checks", "grade": "checks", "EXERCISES": "registry",
            "Report": "report"}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
