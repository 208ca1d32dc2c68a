"""The harness's runners. Importing the package registers the config schemas (``runners.schema``) in
Hydra's ConfigStore, which the group yamls name in their defaults lists."""

from runners import schema as _schema

_schema.register()
