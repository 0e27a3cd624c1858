from mobius.cli import main

raise SystemExit(main())
