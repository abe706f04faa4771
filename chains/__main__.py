from chains.cli import main

main()
