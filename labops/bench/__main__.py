from labops.bench import main

main()
