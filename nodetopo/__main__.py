from nodetopo.cli import main

raise SystemExit(main())
