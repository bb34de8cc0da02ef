"""What the Python tests share: whether triton (the build's venv) is importable, for the tests
that compile a real kernel."""


def have_triton():
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True
