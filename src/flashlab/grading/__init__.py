"""The autograder: ``check("ex03_tiled_forward")`` grades a learner's exercise module.

``check`` loads the module from ``exercises/`` (or ``exercises_dir=``, or the folder named by
FLASHLAB_EXERCISES_DIR), runs public then hidden randomised cases against flashlab's reference
functions in a separate process with a time limit per case, and returns a :class:`Report`
(HTML in Jupyter, text when printed). ``flashlab grade`` is the command-line front end.
Exercise ids: ``flashlab.grading.registry.EXERCISES``.
"""
from flashlab.grading.checks import check, find_exercises_dir, grade
from flashlab.grading.registry import EXERCISES
from flashlab.grading.report import Report

__all__ = ["EXERCISES", "Report", "check", "find_exercises_dir", "grade"]
