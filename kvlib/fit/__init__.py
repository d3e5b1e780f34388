"""Every fit and every error band: the speed model's efficiencies and step costs fitted on
measured throughput, its held-out and leave-one-source-out errors, and the memory overheads
fitted on engine start-up logs. Imports every layer below ``serve``."""
