from headrace.ops.cli import main

main()
