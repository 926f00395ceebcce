from cronctl.entry import main

main()
