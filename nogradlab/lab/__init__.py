"""lab: what a learner touches in a notebook. Setup (``notebook``), pictures (``plots``, ``diagrams``),
widgets and magics, the serving demo, the exercises, and ``memory``, the lessons' one name for
measuring and estimating. Imports only ``core`` and ``estimate``."""
