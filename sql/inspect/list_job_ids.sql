-- The ids of a page of jobs: list_jobs.sql, whose text replaces the
-- placeholder below, with the same parameters. Bulk actions page through
-- them (keyset: $6 = the last id of the previous page).
SELECT page.id FROM (
{list_jobs}
) AS page
ORDER BY page.id DESC
