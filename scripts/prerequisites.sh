#!/bin/sh
# Installs what pip cannot: nothing yet. The Spark pipeline adds Java/JDBC checks here.
exit 0
