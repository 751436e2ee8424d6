"""The run layer, above the algorithms: builds a run from its config (``stack``), drives the round loop
(``simulation``), asks clients for a selection rule (``oracle``) and trains clients in worker processes
(``workers``)."""
