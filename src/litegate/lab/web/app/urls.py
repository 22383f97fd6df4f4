from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("", views.posts_page, name="posts"),
    path("posts/<int:pk>/", views.post_page, name="post"),
    path("users/<int:pk>/", views.user_page, name="user"),
    path("benchmarking/<str:action>", views.benchmarking, name="benchmarking"),
]
