"""The tests are packages (tests.<folder>.test_<module>), each folder mirroring a package of
workflow_scripts, so two folders may hold test files of one name."""
