"""Physical planning: logical plans and TeraSort jobs into stages of the one DAG runner."""
