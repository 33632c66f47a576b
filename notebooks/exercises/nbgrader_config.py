# nbgrader configuration of the labops exercises. Run nbgrader's commands from this folder.
c = get_config()  # noqa: F821 (nbgrader provides get_config)

c.CourseDirectory.course_id = "labops"
# The gradebook is one SQLite file here: no server, no account. `timeout`: several autograde processes
# (one per student, in parallel) wait for each other's writes instead of failing with "database is locked".
c.CourseDirectory.db_url = "sqlite:///gradebook.db?timeout=120"
# source/<assignment>/ (with solutions) -> release/<assignment>/ (what students get);
# submissions go to submitted/<student>/<assignment>/, autograde writes autograded/, feedback feedback/.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "__pycache__", "*.pyc", ".DS_Store"]

# Autograde is nbgrader's own pipeline with two steps of labops's (labops/exercises/grading.py):
# - ContainedExecute runs the student's kernel in a bubblewrap sandbox (when `bwrap` is installed): it
#   cannot write the gradebook or see the course folder; a kernel that dies or hangs stops only the cells
#   after it, and the notebook is still graded.
# - TrustedScores, before SaveAutoGrades records anything: every graded check cell's points and feedback
#   come from the student's cells run again in a bounded child process, on cases drawn from the secret
#   below, compared in nbgrader's own process. What the kernel printed or displayed is not read.
c.Autograde.autograde_preprocessors = [
    "labops.exercises.grading.ContainedExecute",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "labops.exercises.grading.TrustedScores",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]
# The instructor's secret: the grader's cases are drawn from it. Made on first use; keep it out of the
# course folder and of anything students get.
c.TrustedScores.secret_file = "~/.config/labops/grader_secret"
c.TrustedScores.memory_gb = 6.0  # address space of the process that runs a student's code
c.TrustedScores.sandbox = "auto"  # bubblewrap when installed; "bwrap" to refuse to grade without it

# The notebook's own run (for the student's outputs in the feedback) stops a cell after this long and
# skips the cells after it; the points do not depend on it (the trusted check has its own limits: 60 s a
# cell, 20 s a case, 5 minutes to build the C++ exercise).
c.Execute.timeout = 120
c.Execute.interrupt_on_timeout = True

# Student versions: the solution region becomes this stub.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
