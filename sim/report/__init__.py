"""Where results leave: charts, words, HTML reports, snapshot files and the snapshot store."""
