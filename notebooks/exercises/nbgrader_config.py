# nbgrader configuration of the labops exercises. Run nbgrader's commands from this folder.
c = get_config()  # noqa: F821 (nbgrader provides get_config)

c.CourseDirectory.course_id = "labops"
# The gradebook is one SQLite file here: no server, no account.
c.CourseDirectory.db_url = "sqlite:///gradebook.db"
# source/<assignment>/ (with solutions) -> release/<assignment>/ (what students get);
# submissions go to submitted/<student>/<assignment>/, autograde writes autograded/, feedback feedback/.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "__pycache__", "*.pyc", ".DS_Store"]

# A cell may run this long before it is interrupted and scored 0 (an endless loop in a student's
# cell); the checks themselves stop a student's function after 20 s, and the compiled-op exercise
# builds in a child process with its own limit.
c.Execute.timeout = 600
c.Execute.interrupt_on_timeout = True
# A dead kernel (a segfault, the memory limit) is retried once, then that notebook is reported as failed
# and autograde goes on with the next one.
c.Execute.execute_retries = 0

# Student versions: the solution region becomes this stub.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
