-- The paused jobtypes in byte order (the column's "C" collation).
SELECT jobtype FROM paused ORDER BY jobtype
