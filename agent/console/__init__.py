"""The console: the people who read the calls, what each may see, and the trail they leave.

``users`` keeps the accounts and their argon2 hashes, ``cli`` is
``python -m agent users``, ``sessions`` the logged-in browsers, ``csrf`` the
form tokens, ``ratelimit`` the brake on password guessing, ``audit`` the log of
who viewed what, and ``auth`` ties them into the aiohttp server. See
docs/console.md.
"""
