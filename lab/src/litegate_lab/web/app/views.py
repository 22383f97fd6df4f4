"""The seed's routes, in idiomatic Django: every ``/benchmarking/…`` request
first marks a random user as seen (in autocommit), then runs one action, picked at random
with the mix's weights (``.._actions``, shared with the FastAPI app). Actions that write
read first, then write, inside ``transaction.atomic()``, as Django code does; reads run in
autocommit. A write that committed is acknowledged in the ledger (``.._acks``) and answers
with a redirect to the page it changed, as in the seed (hey follows it)."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable

from django.db import transaction
from django.db.models import Max, Min, Model
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from .. import _acks
from .._actions import UnknownAction, choose
from .models import Comment, Post, User


def _random_row(model: type[Model]) -> Model | None:
    """The first row at or after a random id (the seed's ``where("id >= ?",
    rand(min..max)).limit(1).first``)."""
    bounds = model._default_manager.aggregate(lo=Min("id"), hi=Max("id"))
    if bounds["lo"] is None:
        return None
    start = random.randint(bounds["lo"], bounds["hi"])
    return model._default_manager.filter(id__gte=start).order_by("id").first()


def _touch_user() -> User:
    """The seed's ``before_action``: a random user, marked as seen (a read,
    then a one-statement save in autocommit)."""
    user = _random_row(User)
    if not isinstance(user, User):
        raise Http404("no users: seed the database (litegate web seed)")
    user.last_seen_at = timezone.now()
    user.save(update_fields=["last_seen_at"])
    return user


def _describe(request: HttpRequest) -> str:
    keys = (
        "REQUEST_METHOD", "PATH_INFO", "QUERY_STRING", "REMOTE_ADDR", "SERVER_NAME",
        "SERVER_PORT", "SERVER_PROTOCOL", "HTTP_HOST", "HTTP_USER_AGENT", "HTTP_ACCEPT",
    )  # fmt: skip
    return "\n".join(f"{k}: {request.META[k]}" for k in keys if k in request.META)


def post_create(request: HttpRequest, user: User) -> HttpResponse:
    with transaction.atomic():
        post = Post.objects.create(
            user=user, title=f"Post {uuid.uuid4()}", description=_describe(request)
        )
    _acks.record("post_create", post.pk)
    return HttpResponseRedirect(f"/posts/{post.pk}/")


def comment_create(request: HttpRequest, user: User) -> HttpResponse:
    with transaction.atomic():
        post = _random_row(Post)
        if post is None:
            raise Http404("no posts left")
        comment = Comment.objects.create(user=user, post=post, body=f"Comment {uuid.uuid4()}")
    _acks.record("comment_create", comment.pk, comment.post_id)
    return HttpResponseRedirect(f"/posts/{comment.post_id}/")


def post_destroy(request: HttpRequest, user: User) -> HttpResponse:
    with transaction.atomic():
        post = _random_row(Post)
        if post is None:
            raise Http404("no posts left")
        pk = post.pk
        post.delete()  # and its comments (CASCADE)
    _acks.record("post_destroy", pk)
    return HttpResponseRedirect("/")


def comment_destroy(request: HttpRequest, user: User) -> HttpResponse:
    with transaction.atomic():
        comment = _random_row(Comment)
        if not isinstance(comment, Comment):
            raise Http404("no comments left")
        pk = comment.pk
        comment.delete()
    _acks.record("comment_destroy", pk)
    return HttpResponseRedirect(f"/posts/{comment.post_id}/")


def post_show(request: HttpRequest, user: User) -> HttpResponse:
    post = _random_row(Post)
    if not isinstance(post, Post):
        raise Http404("no posts left")
    return _post(request, post)


def posts_index(request: HttpRequest, user: User) -> HttpResponse:
    start = _random_row(Post)
    posts = Post.objects.filter(id__gte=start.pk if start else 0).order_by("id")[:100]
    return _posts(request, posts)


def user_show(request: HttpRequest, user: User) -> HttpResponse:
    return _user(request, user)


_ALL = (post_create, comment_create, post_destroy, comment_destroy, post_show, posts_index,
        user_show)  # fmt: skip
ACTIONS: dict[str, Callable[[HttpRequest, User], HttpResponse]] = {f.__name__: f for f in _ALL}


@csrf_exempt
@require_POST
def benchmarking(request: HttpRequest, action: str) -> HttpResponse:
    try:
        action = choose(action)
    except UnknownAction as exc:
        raise Http404(str(exc)) from None
    user = _touch_user()
    return ACTIONS[action](request, user)


# -- the pages a person can look at --------------------------------------------


def _posts(request: HttpRequest, posts: object) -> HttpResponse:
    return render(request, "hn/posts.html", {"posts": posts})


def _post(request: HttpRequest, post: Post) -> HttpResponse:
    comments = post.comments.select_related("user").order_by("id")
    return render(request, "hn/post.html", {"post": post, "comments": comments})


def _user(request: HttpRequest, user: User) -> HttpResponse:
    posts = user.posts.order_by("-id")[:20]
    return render(request, "hn/user.html", {"user": user, "posts": posts})


def posts_page(request: HttpRequest) -> HttpResponse:
    return _posts(request, Post.objects.select_related("user").order_by("-id")[:100])


def post_page(request: HttpRequest, pk: int) -> HttpResponse:
    return _post(request, get_object_or_404(Post.objects.select_related("user"), pk=pk))


def user_page(request: HttpRequest, pk: int) -> HttpResponse:
    return _user(request, get_object_or_404(User, pk=pk))
