"""The lowest layer: units and dtypes, argument checks, the data folder and its CSV schemas.
Imports nothing else from kvlib."""
