"""The REST service (FastAPI): champions, programs and their lineage, jobs.

``api.app.create_app(database_url)`` builds the app on an already migrated database. The service
only reads stored results and cancels jobs; it never compiles or runs submitted code.
"""
