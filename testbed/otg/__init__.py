"""The Open Traffic Generator (OTG) front end: `testbed otg serve`."""
