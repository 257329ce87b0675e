"""In-process CPU speed of the planning core (estimate, recommend, plan check), warm, as a
running server calls it; no HTTP."""
