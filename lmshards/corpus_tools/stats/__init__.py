"""`lmshards stats`: corpus statistics of a shard set, counted by tensorflow-transform analyzers on Beam.

stats.py holds the counts-to-figures functions and the pipeline, page.py the HTML report, cli.py the command.
"""
