from tawa.cli import main
import sys

sys.exit(main())
