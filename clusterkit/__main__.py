from clusterkit.cli import main

raise SystemExit(main())
