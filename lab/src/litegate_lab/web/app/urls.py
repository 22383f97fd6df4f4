from __future__ import annotations

from django.conf import settings
from django.urls import path
from django.views.decorators.cache import cache_page

from . import views

# The front page, cached by the backend `bench web --cache` names (per URL,
# CACHE_SECONDS); uncached without one.
front_page = (
    cache_page(settings.CACHE_SECONDS)(views.posts_page) if settings.CACHE else views.posts_page
)

urlpatterns = [
    path("", front_page, name="posts"),
    path("posts/<int:pk>/", views.post_page, name="post"),
    path("users/<int:pk>/", views.user_page, name="user"),
    path("benchmarking/<str:action>", views.benchmarking, name="benchmarking"),
]
