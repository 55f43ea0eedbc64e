from evalsuite.cli import app

app(prog_name="evalsuite")
