"""The synthesis path: trace on meta, lower, bind weights. Imported only when a build runs."""
