from evalsuite.cli.main import main

main()
